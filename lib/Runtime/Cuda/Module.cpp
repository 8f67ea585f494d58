//===- Module.cpp - the entry points of lib/libmoe_backend_cuda.so --------===//
//
// The CUDA backend as the module moe-run loads for --device cuda
// (BackendModule.h). Module.map keeps these two symbols global and makes
// every other symbol local, among them the module's own static copy of the
// engine, comm and artifact code it links: the module's code only ever
// calls its own copy, and moe-run's copy is never replaced by it.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Backend/BackendModule.h"
#include "moe/Runtime/Cuda/CudaBackend.h"

extern "C" __attribute__((visibility("default"))) int
moe_backend_abi_version() {
  return MOE_BACKEND_ABI_VERSION;
}

extern "C" __attribute__((visibility("default"))) moe::rt::BackendFactory
moe_backend_factory() {
  return &moe::rt::cuda::createCudaBackend;
}
