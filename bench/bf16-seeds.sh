#!/usr/bin/env bash
# BF16 mixed precision trains the tiny model as fp32 does (issue 16): over
# --seeds seeds (each its own initial weights and batches, --seed and
# --data-seed), the mean loss of the last 50 of 300 steps of BF16 runs
# against fp32's, with fp32's own seed-to-seed spread beside it. The target
# is a mean within 3% of fp32's; the pass/fail of test/moe-run/bf16-seeds.test
# is a t test at a 1e-6 false-failure tail instead, since a fixed 3% bound
# on 16 seeds is about two standard errors and would fail by chance.
#   bench/bf16-seeds.sh [--seeds N] [--jobs N]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=16
jobs=2
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "usage: bench/bf16-seeds.sh [--seeds N] [--jobs N]" >&2; exit 2 ;;
  esac
done
[ -x build/bin/moe-run ] || scripts/setup.sh
out=bench/out
mkdir -p "$out"
build/bin/moe-data synth --out "$out/seeds-corpus.bin" --tokens 400000 >/dev/null
build/bin/moec models/tiny.mlir --precision=fp32 -o "$out/fp32.moebin"
build/bin/moec models/tiny.mlir --precision=bf16 -o "$out/bf16.moebin"
build/bin/moec models/tiny.mlir --precision=bf16 --grad-reduce-dtype=bf16 \
  -o "$out/bf16-reduce-bf16.moebin"
PATH="$PWD/build/bin:$PATH" python3 test/moe-run/compare_seeds.py \
  --seeds "$seeds" --steps 300 --last 50 --jobs "$jobs" --report-within 0.03 \
  --data "$out/seeds-corpus.bin" \
  "$out/fp32.moebin" "$out/bf16.moebin" "$out/bf16-reduce-bf16.moebin"
