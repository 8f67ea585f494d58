#!/usr/bin/env bash
# Does the planner's memory model match what moe-run holds (issue 21)? For
# the meshes of bench/cpu-cost.sh, compares per rank:
#   * the memory `moec --plan` predicts for that plan (its analytical model,
#     the one that decides what fits a GPU), on hardware/cpu-local.yaml;
#   * the compiled plan's total (`moec --report=memory`: the arena the
#     compiler packed, parameters, optimizer state and kernel workspace);
#   * the resident growth moe-run measures to its peak.
# Prints a markdown table with predicted / measured per mesh.
#   bench/cpu-memory.sh [--steps N]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=3
out=bench/out/cpu-memory
# shellcheck source=bench/cpu-meshes.sh
source bench/cpu-meshes.sh
echo "| mesh | predicted MiB | compiled plan MiB | measured MiB | predicted / measured |"
echo "|---|---:|---:|---:|---:|"
for entry in "${meshes[@]}"; do
  IFS='|' read -r name flags ranks fix <<<"$entry"
  tag=$(echo "$name" | tr -c 'a-z0-9' '_')
  predicted=$(build/bin/moec "$model" --plan --plan-only --plan-top 1 \
    --cluster hardware/cpu-local.yaml --gpus "$ranks" --global-batch $batch \
    --plan-fix "$fix" | sed -nE 's/.*memory ([0-9.e+-]+) of .*/\1/p')
  # shellcheck disable=SC2086
  build/bin/moec "$model" $flags --report=memory -o "$out/$tag.moebin" \
    > "$out/$tag.memory.txt"
  compiled=$(sed -nE 's/^ *total \(peak\) +([0-9.]+) MiB/\1/p' "$out/$tag.memory.txt")
  OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np "$ranks" build/bin/moe-run \
    "$out/$tag.moebin" --data "$out/corpus.bin" --steps "$steps" \
    --threads 1 --no-plot > "$out/$tag.run.txt"
  measured=$(sed -nE 's/^memory per rank: .* ([0-9.]+) MiB measured.*/\1/p' \
    "$out/$tag.run.txt" | head -1)
  /usr/bin/python3 -c "
p = float('$predicted') * 1024; c = float('$compiled'); m = float('$measured')
print(f'| $name | {p:.1f} | {c:.1f} | {m:.1f} | {p / m:.2f} |')"
done
