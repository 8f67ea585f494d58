#!/usr/bin/env bash
# Expert all-to-all overlap: the tiny model over 4 expert-parallel ranks,
# run with one exchange each way per layer (--expert-chunks 1, the
# baseline) and with 4 chunks whose exchanges overlap expert compute, in the
# same invocation. Prints the step time of each, their ratio, and the share
# of the all-to-all time hidden behind expert compute (bench/overlap.py).
# Usage: bench/overlap.sh [STEPS]   (after the build; needs mpirun)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-30}
out=bench/out/overlap
mkdir -p "$out"
build/bin/moe-data synth --out "$out/tokens.bin" --tokens 100000 > /dev/null
build/bin/moec models/tiny.mlir --mesh ep=4 -o "$out/ep4.moebin"
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 4)
for chunks in 1 4; do
  "${mpirun[@]}" build/bin/moe-run "$out/ep4.moebin" --data "$out/tokens.bin" \
    --steps "$steps" --threads 1 --quiet --expert-chunks "$chunks" \
    --metrics "$out/chunks$chunks.jsonl" --trace "$out/chunks$chunks.json"
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def step_ms(path):
    records = [json.loads(l) for l in open(path)][3:]  # after warm-up
    deltas = [b["elapsed_s"] - a["elapsed_s"]
              for a, b in zip(records, records[1:])]
    deltas.sort()
    return 1000 * deltas[len(deltas) // 2]
one, four = step_ms(f"{out}/chunks1.jsonl"), step_ms(f"{out}/chunks4.jsonl")
print(f"step (median): 1 chunk {one:.1f} ms, 4 chunks {four:.1f} ms, "
      f"ratio {one / four:.2f}x")
PY
python3 bench/overlap.py "$out"/chunks4.rank*.json | tail -1
