//===- DeviceModels.cpp - the devices the virtual GPU can be --------------===//
//
// The emulated device models, with the figures of the CUDA C Programming
// Guide's compute capability tables and the products' data sheets, the
// choice of one for the process, and the calls that describe it
// (cudaGetDeviceCount, cudaGetDeviceProperties, cudaFuncSetAttribute, ...).
// One device per process: ordinal 0.
//
// Environment:
//   MOE_VIRTUAL_GPU=NAME  the device when moe-run's --virtual-gpu (which
//                         calls selectDevice) did not choose one: a100,
//                         h100 or h200. Read once, at the first CUDA call.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Errors.h"
#include "VirtualGpu/Runtime.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace moe::rt::virtual_gpu {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr size_t kKiB = 1024;

// Shared by the three models (compute capabilities 8.0 and 9.0).
#define MOE_COMMON_LIMITS                                                      \
  /*maxThreadsPerBlock=*/1024, /*maxBlockDim=*/{1024, 1024, 64},               \
      /*maxGridDim=*/{2147483647, 65535, 65535},                               \
      /*sharedBytesPerBlock=*/48 * kKiB

constexpr DeviceModel kModels[] = {
    {"a100", "NVIDIA A100-SXM4-80GB (virtual)", 8, 0,
     /*multiprocessors=*/108, /*globalMemoryBytes=*/80 * kGiB,
     MOE_COMMON_LIMITS, /*sharedBytesPerBlockOptin=*/163 * kKiB,
     /*sharedBytesPerMultiprocessor=*/164 * kKiB,
     /*registersPerBlock=*/65536, /*registersPerMultiprocessor=*/65536,
     /*maxThreadsPerMultiprocessor=*/2048, /*warpSize=*/32},
    {"h100", "NVIDIA H100 80GB HBM3 (virtual)", 9, 0,
     /*multiprocessors=*/132, /*globalMemoryBytes=*/80 * kGiB,
     MOE_COMMON_LIMITS, /*sharedBytesPerBlockOptin=*/227 * kKiB,
     /*sharedBytesPerMultiprocessor=*/228 * kKiB,
     /*registersPerBlock=*/65536, /*registersPerMultiprocessor=*/65536,
     /*maxThreadsPerMultiprocessor=*/2048, /*warpSize=*/32},
    {"h200", "NVIDIA H200 (virtual)", 9, 0,
     /*multiprocessors=*/132, /*globalMemoryBytes=*/141 * kGiB,
     MOE_COMMON_LIMITS, /*sharedBytesPerBlockOptin=*/227 * kKiB,
     /*sharedBytesPerMultiprocessor=*/228 * kKiB,
     /*registersPerBlock=*/65536, /*registersPerMultiprocessor=*/65536,
     /*maxThreadsPerMultiprocessor=*/2048, /*warpSize=*/32},
};
#undef MOE_COMMON_LIMITS

/// The model selectDevice chose; null until then.
std::atomic<const DeviceModel *> chosen{nullptr};

const DeviceModel *modelFromEnvironment() {
  const char *name = std::getenv("MOE_VIRTUAL_GPU");
  if (!name || !*name)
    return nullptr;
  const DeviceModel *model = findDeviceModel(name);
  if (!model)
    std::fprintf(stderr,
                 "virtual gpu: unknown MOE_VIRTUAL_GPU '%s' (known: %s); no "
                 "device\n",
                 name, knownDeviceModels().c_str());
  return model;
}

/// The dynamic shared memory each kernel opted in to.
struct FunctionAttributes {
  std::mutex mutex;
  std::map<const void *, size_t> dynamicSharedLimits;
};
FunctionAttributes &functionAttributes() {
  static FunctionAttributes *instance = new FunctionAttributes;
  return *instance;
}

} // namespace

const DeviceModel *findDeviceModel(std::string_view name) {
  for (const DeviceModel &model : kModels)
    if (name == model.name)
      return &model;
  return nullptr;
}

std::string knownDeviceModels() {
  return absl::StrJoin(kModels, ", ",
                       [](std::string *out, const DeviceModel &model) {
                         out->append(model.name);
                       });
}

absl::Status selectDevice(std::string_view name) {
  const DeviceModel *model = findDeviceModel(name);
  if (!model)
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown virtual gpu '", std::string(name), "' (known: ", knownDeviceModels(),
        ")"));
  chosen.store(model);
  return absl::OkStatus();
}

const DeviceModel *selectedDevice() {
  if (const DeviceModel *model = chosen.load())
    return model;
  static const DeviceModel *fromEnvironment = modelFromEnvironment();
  // selectDevice may have run while the environment was read.
  const DeviceModel *model = chosen.load();
  return model ? model : fromEnvironment;
}

size_t dynamicSharedLimit(const void *kernel) {
  FunctionAttributes &attributes = functionAttributes();
  std::lock_guard<std::mutex> lock(attributes.mutex);
  auto it = attributes.dynamicSharedLimits.find(kernel);
  if (it != attributes.dynamicSharedLimits.end())
    return it->second;
  const DeviceModel *model = selectedDevice();
  return model ? model->sharedBytesPerBlock : 0;
}

} // namespace moe::rt::virtual_gpu

using namespace moe::rt::virtual_gpu;

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
  if (!count)
    return failed(cudaErrorInvalidValue);
  *count = 0;
  if (cudaError_t error = checkCall())
    return error;
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (cudaError_t error = checkCall())
    return error;
  return device == 0 ? cudaSuccess : failed(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int *device) {
  if (cudaError_t error = checkCall())
    return error;
  if (!device)
    return failed(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *properties, int device) {
  if (cudaError_t error = checkCall())
    return error;
  if (!properties)
    return failed(cudaErrorInvalidValue);
  if (device != 0)
    return failed(cudaErrorInvalidDevice);
  const DeviceModel &model = *selectedDevice();
  std::memset(properties, 0, sizeof(*properties));
  std::strncpy(properties->name, model.deviceName,
               sizeof(properties->name) - 1);
  properties->major = model.major;
  properties->minor = model.minor;
  properties->multiProcessorCount = model.multiprocessors;
  properties->totalGlobalMem = model.globalMemoryBytes;
  properties->sharedMemPerBlock = model.sharedBytesPerBlock;
  properties->sharedMemPerBlockOptin = model.sharedBytesPerBlockOptin;
  properties->sharedMemPerMultiprocessor = model.sharedBytesPerMultiprocessor;
  // What the multiprocessor keeps of a block's shared memory for itself
  // (compute capability 8.0 and later): per SM less per-block opt-in.
  properties->reservedSharedMemPerBlock =
      model.sharedBytesPerMultiprocessor - model.sharedBytesPerBlockOptin;
  properties->regsPerBlock = model.registersPerBlock;
  properties->regsPerMultiprocessor = model.registersPerMultiprocessor;
  properties->maxThreadsPerBlock = model.maxThreadsPerBlock;
  for (int i = 0; i < 3; ++i) {
    properties->maxThreadsDim[i] = model.maxBlockDim[i];
    properties->maxGridSize[i] = model.maxGridDim[i];
  }
  properties->warpSize = model.warpSize;
  properties->maxThreadsPerMultiProcessor = model.maxThreadsPerMultiprocessor;
  properties->totalConstMem = 64 * 1024;
  // The emulation infers the side of a cudaMemcpyDefault copy from the
  // pointer, and runs streams concurrently, as these promise.
  properties->unifiedAddressing = 1;
  properties->concurrentKernels = 1;
  properties->memoryPoolsSupported = 1;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *function,
                                 cudaFuncAttribute attribute, int value) {
  if (cudaError_t error = checkCall())
    return error;
  if (!function)
    return failed(cudaErrorInvalidDeviceFunction);
  // The one attribute the backend sets; the others change nothing the
  // emulation models, so they are refused rather than ignored.
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize)
    return failed(cudaErrorNotSupported);
  if (value < 0 ||
      static_cast<size_t>(value) > selectedDevice()->sharedBytesPerBlockOptin)
    return failed(cudaErrorInvalidValue);
  FunctionAttributes &attributes = functionAttributes();
  std::lock_guard<std::mutex> lock(attributes.mutex);
  attributes.dynamicSharedLimits[function] = static_cast<size_t>(value);
  return cudaSuccess;
}

} // extern "C"
