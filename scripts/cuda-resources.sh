#!/usr/bin/env bash
# Static resource checks of the CUDA backend's kernels (issue 46, item 6):
# each kernel's registers, spills (stack, local memory) and static shared
# memory on sm_80 and sm_90, read from the nvcc-built objects of
# lib/Runtime/Cuda with cuobjdump, and each launch of the virtual GPU's
# launch logs (MOE_VIRTUAL_GPU_LAUNCH_LOG) checked against the SM's register
# file, block size and shared memory limits. Without a log, kernels are
# checked at the block their __launch_bounds__ allow, and the others not.
# Exits 1 when a launch exceeds a limit; spills are reported only.
#
#   scripts/cuda-resources.sh [--objects DIR] [LOG...]
#
# DIR: the objects (default build/lib/Runtime/Cuda/CMakeFiles/
# moe_runtime_cuda.dir). The rules and the output: scripts/cuda_kernels.py.
set -euo pipefail
exec python3 "$(dirname "$0")/cuda_kernels.py" resources "$@"
