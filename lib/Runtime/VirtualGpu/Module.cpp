//===- Module.cpp - the entry points of lib/libmoe_backend_virtual_gpu.so -===//
//
// The CUDA backend built for the virtual GPU, as the module moe-run loads
// for `--device cuda --virtual-gpu NAME` (Registry.cpp). Its factory
// selects the emulated device first, so everything the backend then asks
// the CUDA runtime (cudaGetDeviceProperties, ...) is NAME's. The same
// version script as the real module keeps every other symbol local: the
// emulated cudaMalloc and friends never bind to a real libcudart.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Backend/BackendModule.h"
#include "moe/Runtime/Cuda/CudaBackend.h"

#include "VirtualGpu/Runtime.h"

#include "absl/strings/str_cat.h"

namespace {

absl::StatusOr<std::unique_ptr<moe::rt::Backend>>
createVirtualGpuBackend(std::shared_ptr<const moe::rt::Program> program,
                        const moe::rt::BackendOptions &options) {
  if (options.virtualGpu.empty())
    return absl::InvalidArgumentError(
        "the virtual GPU backend needs --virtual-gpu NAME");
  if (absl::Status selected =
          moe::rt::virtual_gpu::selectDevice(options.virtualGpu);
      !selected.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--virtual-gpu: ", selected.message()));
  return moe::rt::cuda::createCudaBackend(std::move(program), options);
}

} // namespace

extern "C" __attribute__((visibility("default"))) int
moe_backend_abi_version() {
  return MOE_BACKEND_ABI_VERSION;
}

extern "C" __attribute__((visibility("default"))) moe::rt::BackendFactory
moe_backend_factory() {
  return &createVirtualGpuBackend;
}
