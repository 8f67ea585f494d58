#!/usr/bin/env bash
# The bundled default: build moec, compile models/tiny.mlir, make the tiny
# synthetic corpus, train for 300 steps on the CPU and print the loss curve.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p runs/tiny
build/bin/moec models/tiny.mlir -o runs/tiny/tiny.moebin --report=memory
build/bin/moe-data synth --out runs/tiny/corpus.bin --tokens 200000
build/bin/moe-run runs/tiny/tiny.moebin --data runs/tiny/corpus.bin \
  --steps 300 --log-every 25 --threads 1 --metrics runs/tiny/metrics.jsonl \
  --save runs/tiny/weights.safetensors
