#!/usr/bin/env bash
# CPU training-step benchmark, same thread count, everything measured in the
# same run:
#   1. moe-run against Debian's PyTorch 1.13 eager (bench/torch_baseline.py)
#      on bench/models/cpu-step.mlir: a markdown row, bench/out/cpu-step.json;
#   2. moe-run against the peer users compare with (issue 18): HF
#      transformers' MixtralForCausalLM on current PyTorch from PyPI,
#      installed here into bench/out/peer-venv, eager and under
#      torch.compile, on bench/models/cpu-step-moe.mlir (every layer MoE, as
#      Mixtral's): a markdown row with both ratios and each side's model
#      GFLOP/s against this core's measured sgemm rate (OpenBLAS, one
#      thread), and bench/out/cpu-step-peer.json. --no-peer skips it.
#   bench/run.sh [--threads N] [--steps N] [--no-peer]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2
steps=10
peer=1
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --no-peer) peer=0; shift ;;
    *) echo "usage: bench/run.sh [--threads N] [--steps N] [--no-peer]" >&2; exit 2 ;;
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

[ "$peer" = 1 ] || exit 0
venv=$out/peer-venv
if ! "$venv/bin/python" -c "import torch, transformers" 2>/dev/null; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check torch transformers || {
    echo "bench/run.sh: cannot install torch and transformers from PyPI into $venv" >&2
    exit 1
  }
fi
build/bin/moec bench/models/cpu-step-moe.mlir -o "$out/cpu-step-moe.moebin"
build/bin/moe-run --model-config "$out/cpu-step-moe.moebin" > "$out/cpu-step-moe.json"
build/bin/moe-run "$out/cpu-step-moe.moebin" --threads "$threads" \
  --data "$out/corpus.bin" --steps $((warmup + steps)) --quiet \
  --metrics "$out/moe-run-moe.jsonl"
for mode in eager compile; do
  flag=()
  [ "$mode" = compile ] && flag=(--compile)
  "$venv/bin/python" bench/gpu_torch_peer.py --config "$out/cpu-step-moe.json" \
    --data "$out/corpus.bin" --device cpu --threads "$threads" \
    --steps $((warmup + steps)) --warmup "$warmup" "${flag[@]}" \
    --metrics "$out/peer-$mode.jsonl" > "$out/peer-$mode.txt"
done
# This core's sgemm rate through OpenBLAS, the BLAS moe-run calls.
OPENBLAS_NUM_THREADS=1 /usr/bin/python3 - > "$out/sgemm.json" <<'PY'
import json, time
import numpy as np
n = 1024
a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
b = a.T.copy()
a @ b
best = min((lambda t: (a @ b, time.perf_counter() - t)[1])(time.perf_counter())
           for _ in range(5))
print(json.dumps({"sgemm_flops_per_s": 2 * n ** 3 / best}))
PY
"$venv/bin/python" - "$out" "$warmup" "$threads" <<'PY'
import json, statistics, sys
out, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
records = [json.loads(l) for l in open(f"{out}/moe-run-moe.jsonl")]
elapsed = [r["elapsed_s"] for r in records]
moe = statistics.median(b - a for a, b in zip(elapsed[warmup - 1:], elapsed[warmup:]))
# The artifact's model FLOPs per step, the same work for both sides.
cfg = json.load(open(f"{out}/cpu-step-moe.json"))
flops = (records[-1]["flops_per_s"] / records[-1]["tokens_per_s"]
         * cfg["batch"] * cfg["seq"])
def peer(mode):
    rows = [json.loads(l) for l in open(f"{out}/peer-{mode}.jsonl")]
    return statistics.median(r["step_s"] for r in rows if not r["warmup"])
eager, compiled = peer("eager"), peer("compile")
sgemm = json.load(open(f"{out}/sgemm.json"))["sgemm_flops_per_s"]
import torch, transformers
result = {"model": "cpu_step_moe", "threads": threads, "moe_run_step_s": moe,
          "eager_step_s": eager, "compile_step_s": compiled,
          "speedup_vs_eager": eager / moe, "speedup_vs_compile": compiled / moe,
          "model_flops_per_step": flops, "sgemm_flops_per_s_one_core": sgemm,
          "torch": torch.__version__, "transformers": transformers.__version__}
json.dump(result, open(f"{out}/cpu-step-peer.json", "w"), indent=2)
g = lambda s: flops / s / 1e9
print(f"| cpu_step_moe | {threads} | {moe*1e3:.1f} ms ({g(moe):.1f} GFLOP/s) | "
      f"{eager*1e3:.1f} ms ({g(eager):.1f}) | {compiled*1e3:.1f} ms ({g(compiled):.1f}) | "
      f"{eager/moe:.2f}x | {compiled/moe:.2f}x | {sgemm/1e9:.1f} GFLOP/s |")
print(f"(PyTorch {torch.__version__}, transformers {transformers.__version__})")
PY
