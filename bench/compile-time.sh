#!/usr/bin/env bash
# Does moec's compile time grow linearly with the model's depth (issue 14)?
# Compiles the tiny model's widths (models/tiny.mlir) with 50 to 999 layers
# and prints, per depth, the wall time of the whole compile (median of
# --runs runs) and the time --mlir-timing gives the memory planner, with
# the time per layer: flat per-layer times mean linear growth.
#   bench/compile-time.sh [--runs N] [--moec PATH] [LAYERS...]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
moec=build/bin/moec
depths=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --moec) moec=$2; shift 2 ;;
    -*) echo "usage: bench/compile-time.sh [--runs N] [--moec PATH] [LAYERS...]" >&2; exit 2 ;;
    *) depths+=("$1"); shift ;;
  esac
done
[ ${#depths[@]} -gt 0 ] || depths=(50 100 200 400 999)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "| layers | compile (s) | per layer (ms) | PlanMemory (s) |"
echo "|---|---|---|---|"
for layers in "${depths[@]}"; do
  sed "s/layers = 2,/layers = $layers,/" models/tiny.mlir > "$out/model.mlir"
  walls=() plans=()
  for _ in $(seq "$runs"); do
    start=$(date +%s.%N)
    "$moec" "$out/model.mlir" -o "$out/model.moebin" --mlir-timing 2> "$out/timing.txt"
    end=$(date +%s.%N)
    walls+=("$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')")
    plans+=("$(awk '/PlanMemory/ { print $1 }' "$out/timing.txt")")
  done
  wall=$(printf '%s\n' "${walls[@]}" | median)
  plan=$(printf '%s\n' "${plans[@]}" | median)
  perLayer=$(awk -v w="$wall" -v l="$layers" 'BEGIN { printf "%.2f", 1000 * w / l }')
  printf '| %s | %.2f | %s | %.2f |\n' "$layers" "$wall" "$perLayer" "$plan"
done
