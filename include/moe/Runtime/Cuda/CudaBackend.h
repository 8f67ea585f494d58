//===- CudaBackend.h - training steps on a GPU ------------------*- C++ -*-===//
//
// The "cuda" Backend: runs a verified artifact's step with the CUDA kernels
// and cuBLASLt GEMMs (BF16 inputs, fp32 accumulation; everything else fp32
// as on the CPU). A peer of the CPU backend, not built from it: its buffers
// (parameters, optimizer state, inputs, one arena for the temporaries) are
// on the device only; the host keeps a staging copy of the weights
// (engine::HostWeights) for initialisation, weights files and checkpoints.
//
// Over several ranks (one GPU each), the program's groups get NCCL
// communicators: collectives run on the GPU, and the losses' and norms'
// sums over ranks, a few scalars, travel over MPI as on the CPU, as does the
// expert exchange's agreement (its rows go over NCCL). Pipelines are
// refused at creation, saying so.
//
// moe-run reaches it only through lib/libmoe_backend_cuda.so (Module.cpp),
// which it loads for --device cuda.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CUDA_CUDABACKEND_H
#define MOE_RUNTIME_CUDA_CUDABACKEND_H

#include "moe/Runtime/Backend/Backend.h"

namespace moe::rt::cuda {

/// The GPU of this process (the launcher's local rank picks one of those
/// the CUDA runtime sees) with `program`'s buffers allocated on it and
/// zeroed weights, or an error naming what it cannot run: "--device cuda:
/// no CUDA device: ..." without a GPU, "--device cuda (GPU): ..." for a
/// program it cannot run.
absl::StatusOr<std::unique_ptr<Backend>>
createCudaBackend(std::shared_ptr<const Program> program,
                  const BackendOptions &options);

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_CUDA_CUDABACKEND_H
