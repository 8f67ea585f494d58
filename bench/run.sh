#!/usr/bin/env bash
# CPU training-step benchmark: moe-run against PyTorch eager on the same
# model (bench/models/cpu-step.mlir), same thread count, measured in the
# same run. Prints a markdown row for bench/RESULTS.md and writes
# bench/out/cpu-step.json.
#   bench/run.sh [--threads N] [--steps N]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2
steps=10
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "usage: bench/run.sh [--threads N] [--steps N]" >&2; exit 2 ;;
  esac
done
[ -x build/bin/moe-run ] || scripts/setup.sh
out=bench/out
mkdir -p "$out"
build/bin/moec bench/models/cpu-step.mlir -o "$out/cpu-step.moebin"
build/bin/moe-data synth --out "$out/corpus.bin" --tokens 400000 >/dev/null
# One step dump gives the exact model and optimizer config for PyTorch.
rm -rf "$out/dump"
build/bin/moe-run "$out/cpu-step.moebin" --data "$out/corpus.bin" --steps 1 \
  --dump-step "$out/dump" --quiet
warmup=3
build/bin/moe-run "$out/cpu-step.moebin" --threads "$threads" \
  --data "$out/corpus.bin" --steps $((warmup + steps)) --quiet \
  --metrics "$out/moe-run.jsonl"
/usr/bin/python3 bench/torch_baseline.py --config "$out/dump/config.json" \
  --threads "$threads" --warmup "$warmup" --steps "$steps" > "$out/torch.json"
/usr/bin/python3 - "$out" "$warmup" "$threads" <<'PY'
import json, statistics, sys
out, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
records = [json.loads(l) for l in open(f"{out}/moe-run.jsonl")][warmup:]
elapsed = [r["elapsed_s"] for r in records]
prev = [json.loads(l) for l in open(f"{out}/moe-run.jsonl")][warmup - 1]["elapsed_s"]
times = [b - a for a, b in zip([prev] + elapsed[:-1], elapsed)]
moe = statistics.median(times)
torch = json.load(open(f"{out}/torch.json"))["step_s_median"]
cfg = json.load(open(f"{out}/dump/config.json"))
tokens = cfg["batch"] * cfg["seq"]
result = {"model": cfg["name"], "threads": threads, "tokens_per_step": tokens,
          "moe_run_step_s": moe, "pytorch_step_s": torch,
          "speedup_vs_pytorch": torch / moe}
json.dump(result, open(f"{out}/cpu-step.json", "w"), indent=2)
print(f"| {cfg['name']} | {threads} | {tokens} | {moe*1e3:.1f} ms | {torch*1e3:.1f} ms | {torch/moe:.2f}x |")
PY
