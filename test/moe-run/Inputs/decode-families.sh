#!/usr/bin/env bash
# Usage: decode-families.sh DIR MOEC MOE-RUN PYTHON INPUTS MODEL...
#
# For each model INPUTS/MODEL.mlir: trains it 3 steps on random tokens of
# its vocabulary, evaluating one window of seq + 1 held-out tokens after
# the last step, then scores that window with moe-run generate's decoder
# from the saved weights. Prints "MODEL: same loss" when the decoder's
# teacher-forced loss equals the compiled forward's eval_loss (rtol 1e-5,
# check_generate.py same-loss); stops at the first that differs.
set -euo pipefail
dir=$1 moec=$2 moerun=$3 python=$4 inputs=$5
shift 5
here=$(cd "$(dirname "$0")/.." && pwd)
for model in "$@"; do
  "$moec" "$inputs/$model.mlir" -o "$dir/$model.moebin"
  read -r seq vocab < <("$moerun" --model-config "$dir/$model.moebin" |
    "$python" -c "import json, sys; c = json.load(sys.stdin); print(c['seq'], c['vocab'])")
  "$python" - "$dir/$model" "$seq" "$vocab" <<'PY'
import random, struct, sys
prefix, seq, vocab = sys.argv[1], int(sys.argv[2]), min(int(sys.argv[3]), 65536)
draw = random.Random(3)
def write(path, n):
    ids = [draw.randrange(vocab) for _ in range(n)]
    open(path, "wb").write(struct.pack(f"<{n}H", *ids))
write(prefix + ".window.bin", seq + 1)
write(prefix + ".train.bin", 20 * (seq + 1))
PY
  "$moerun" "$dir/$model.moebin" --data "$dir/$model.train.bin" --steps 3 \
    --threads 1 --quiet --eval-data "$dir/$model.window.bin" --eval-every 3 \
    --eval-batches 1 --metrics "$dir/$model.jsonl" --save "$dir/$model.safetensors"
  "$moerun" generate "$dir/$model.moebin" --load "$dir/$model.safetensors" \
    --prompt-data "$dir/$model.window.bin" --max-new 0 --threads 1 > "$dir/$model.out"
  "$python" "$here/check_generate.py" same-loss "$dir/$model.jsonl" "$dir/$model.out" > /dev/null
  echo "$model: same loss"
done
