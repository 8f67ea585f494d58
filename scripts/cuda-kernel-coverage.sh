#!/usr/bin/env bash
# Which of the CUDA backend's kernels the virtual GPU's launch logs
# (MOE_VIRTUAL_GPU_LAUNCH_LOG) reached, and from which programs: every
# __global__ kernel of the nvcc-built objects of lib/Runtime/Cuda, a
# template's instantiations listed under it, then `N of M kernels launched`
# (a kernel is a __global__ definition, as issue 46 counts them;
# --instantiations counts each instantiation). Exits 0 whatever N is.
#
#   scripts/cuda-kernel-coverage.sh [--objects DIR] [--instantiations] LOG...
#
# DIR: the objects (default build/lib/Runtime/Cuda/CMakeFiles/
# moe_runtime_cuda.dir). The rules and the output: scripts/cuda_kernels.py.
set -euo pipefail
exec python3 "$(dirname "$0")/cuda_kernels.py" coverage "$@"
