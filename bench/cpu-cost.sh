#!/usr/bin/env bash
# Does the cost model track the CPU backend (issue 8)? For a few meshes of
# at most 2 ranks (one per core; this machine has 2), compares the step time
# moec --report=cost predicts on hardware/cpu-local.yaml with the median
# step time moe-run measures, in the same run. Prints a markdown table and
# the spread of measured/predicted ratios across the meshes: the model
# tracks when the spread is small (its absolute scale comes from the
# fitted efficiencies in hardware/cpu-local.yaml).
#   bench/cpu-cost.sh [--steps N]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=8
out=bench/out/cpu-cost
# shellcheck source=bench/cpu-meshes.sh
source bench/cpu-meshes.sh
warmup=3
rows=()
for entry in "${meshes[@]}"; do
  IFS='|' read -r name flags ranks _ <<<"$entry"
  tag=$(echo "$name" | tr -c 'a-z0-9' '_')
  # shellcheck disable=SC2086
  build/bin/moec "$model" $flags --cluster hardware/cpu-local.yaml \
    --report=cost -o "$out/$tag.moebin" > "$out/$tag.cost.txt"
  predicted=$(sed -nE 's/^ *step +([0-9.]+) ms/\1/p' "$out/$tag.cost.txt")
  rm -f "$out/$tag.jsonl"
  OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np "$ranks" build/bin/moe-run \
    "$out/$tag.moebin" --data "$out/corpus.bin" --steps $((warmup + steps)) \
    --threads 1 --quiet --metrics "$out/$tag.jsonl"
  rows+=("$name|$predicted|$out/$tag.jsonl")
done
/usr/bin/python3 - "$warmup" "${rows[@]}" <<'PY'
import json, math, statistics, sys
warmup = int(sys.argv[1])
print("| mesh | predicted ms | measured ms | measured / predicted |")
print("|---|---:|---:|---:|")
ratios = []
for row in sys.argv[2:]:
    name, predicted, path = row.split("|")
    records = [json.loads(l) for l in open(path)]
    elapsed = [r["elapsed_s"] for r in records]
    times = [b - a for a, b in zip(elapsed[warmup - 1:-1], elapsed[warmup:])]
    measured = statistics.median(times) * 1e3
    ratio = measured / float(predicted)
    ratios.append(ratio)
    print(f"| {name} | {float(predicted):.1f} | {measured:.1f} | {ratio:.2f} |")
spread = max(ratios) / min(ratios)
geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
print(f"\nratios: geometric mean {geo:.2f}, spread (max/min) {spread:.2f}")
PY
