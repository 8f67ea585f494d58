#!/usr/bin/env bash
# The arena moe-plan-memory plans for the bundled models, plain, pipelined
# and under a memory budget: the figures a change to the packing must keep
# (issue 14). Prints one markdown row per configuration: the arena and the
# peak of live bytes (a lower bound for any packing), exact bytes from the
# compiled IR, and their ratio.
#   bench/arena-sizes.sh [MOEC]    (default build/bin/moec)
set -euo pipefail
cd "$(dirname "$0")/.."
moec=${1:-build/bin/moec}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# model|moec flags
configs=(
  "models/tiny.mlir|"
  "models/tiny.mlir|--pp 2"
  "models/tiny.mlir|--memory-budget=7MB"
  "models/tiny.mlir|--mesh fsdp=2,tp=2"
  "test/moe-run/Inputs/mid.mlir|"
  "test/moe-run/Inputs/mid.mlir|--pp 2"
  "test/moe-run/Inputs/mid.mlir|--memory-budget=170MiB"
  "test/moe-run/Inputs/mid.mlir|--pp 2 --memory-budget=88MiB"
  "test/moe-run/Inputs/deep.mlir|--pp 2 --pipeline-schedule zero-bubble"
  "test/moe-run/Inputs/deep.mlir|--pp 2 --virtual-stages 2 --pipeline-schedule interleaved --microbatches 4"
  "bench/models/cpu-step.mlir|"
  "bench/models/cpu-step.mlir|--pp 2"
  "bench/models/gpu-moe.mlir|"
  "bench/models/gpu-moe.mlir|--pp 2 --memory-budget=40GiB"
  "models/mixtral-8x7b.mlir|"
  "models/mixtral-8x7b.mlir|--pp 4"
  "models/mixtral-8x7b.mlir|--memory-budget=709GiB"
  "models/moe-1t.mlir|"
  "models/moe-1t.mlir|--pp 8 --microbatches 1"
)
echo "| model | flags | arena (bytes) | peak live (bytes) | arena / peak |"
echo "|---|---|---|---|---|"
for entry in "${configs[@]}"; do
  IFS='|' read -r model flags <<<"$entry"
  # shellcheck disable=SC2086
  "$moec" "$model" $flags --emit=mlir -o "$out/step.mlir"
  arena=$(grep -o 'moe.arena_bytes = [0-9]*' "$out/step.mlir" | grep -o '[0-9]*$')
  peak=$(grep -o 'moe.peak_live_bytes = [0-9]*' "$out/step.mlir" | grep -o '[0-9]*$')
  ratio=$(awk -v a="$arena" -v p="$peak" 'BEGIN { printf "%.4f", a / p }')
  echo "| $(basename "$model" .mlir) | ${flags:--} | $arena | $peak | $ratio |"
done
