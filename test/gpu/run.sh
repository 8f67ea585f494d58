#!/usr/bin/env bash
# The prepared GPU check (issue 6), for a machine with an NVIDIA GPU and the
# CUDA toolkit: builds, runs the GPU tests (the CUDA kernels against their
# CPU twins, the conformance suite's device half in fp32 and BF16, the tiny
# model's CPU-vs-GPU losses) and the GPU benchmark (MFU
# of a 1-GPU MoE step against the H200's 989 TFLOP/s dense BF16 peak).
# Prints one summary line per part; the figures go to bench/RESULTS.md by
# hand. Meant to finish in under 8 minutes on an H200.
# Usage: test/gpu/run.sh [BENCH_STEPS]
set -uo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-8}
peak=${MOE_PEAK_FLOPS:-989e12}
status=0
nvidia-smi -L || { echo "run.sh: no GPU (nvidia-smi -L failed)"; exit 77; }

# The compiler needs MLIR; on a machine without it, build the runtime only.
compiler=ON
[ -d /usr/lib/llvm-19/lib/cmake/mlir ] || compiler=OFF
if [ ! -f build-gpu/build.ninja ]; then
  cmake -G Ninja -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release \
    -DMOE_ENABLE_CUDA=ON -DMOE_BUILD_COMPILER=$compiler \
    -DCMAKE_CUDA_ARCHITECTURES="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)" \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py > /dev/null || exit 1
fi
ninja -C build-gpu -j"$(nproc)" > build-gpu/ninja.log 2>&1 ||
  { tail -30 build-gpu/ninja.log; echo "run.sh: build failed"; exit 1; }
echo "build: ok"

build-gpu/bin/CudaTests --gtest_brief=1 || status=1
# The kernels against their CPU twins, mixed precision's (Bf16KernelTest:
# casts, AdamW's working copy, BF16 collectives) among them.
build-gpu/bin/CudaKernelTests --gtest_brief=1 || status=1
# The conformance suite's device half: every instruction of the fp32
# programs and of the mixed-precision ones (tiny-bf16: BF16 working copies,
# activations and gradients) on the GPU against the CPU's kernels.
timeout 300 build-gpu/bin/ConformanceTests --gtest_brief=1 \
  --gtest_filter='Backends/ConformanceTest.EveryOpcode/cuda:ConformanceBf16.*' ||
  status=1
if [ "$compiler" = ON ]; then
  /usr/lib/llvm-19/build/utils/lit/lit.py -sv build-gpu/test --filter 'gpu/' ||
    status=1
fi

# The benchmark: step time of the 1-GPU MoE after two warm-up steps.
if [ "$compiler" = ON ]; then
  out=bench/out/gpu
  mkdir -p "$out"
  build-gpu/bin/moe-data synth --out "$out/tokens.bin" --tokens 2000000 > /dev/null
  build-gpu/bin/moec bench/models/gpu-moe.mlir -o "$out/bf16.moebin" || status=1
  runs="bf16 fp8"
  # Mixed precision (issue 16): BF16 weights and activations in memory.
  if build-gpu/bin/moec --help 2>&1 | grep -q -- '--precision'; then
    build-gpu/bin/moec bench/models/gpu-moe.mlir --precision=bf16 \
      -o "$out/mixed.moebin" || status=1
    runs="$runs mixed"
  fi
  # FP8 expert GEMMs with delayed scales (blockwise needs Blackwell).
  build-gpu/bin/moec bench/models/gpu-moe.mlir --fp8=experts \
    --fp8-scaling=delayed --target=h200 -o "$out/fp8.moebin" || status=1
  for run in $runs; do
    build-gpu/bin/moe-run "$out/$run.moebin" --data "$out/tokens.bin" \
      --steps "$steps" --device cuda --metrics "$out/$run.jsonl" --quiet ||
      { status=1; continue; }
    python3 - "$out/$run.jsonl" "$peak" "$run" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])][2:]
if not records:
    sys.exit("bench: no steps after the warm-up")
flops = sorted(r["flops_per_s"] for r in records)[len(records) // 2]
peak = float(sys.argv[2])
print(f"bench gpu-moe {sys.argv[3]}: {flops / 1e12:.1f} TFLOP/s model FLOPs, "
      f"MFU {flops / peak:.1%} of {peak / 1e12:.0f} TFLOP/s")
PY
  done
fi
exit $status
