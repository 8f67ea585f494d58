//===- Runtime.cpp - the virtual GPU's errors and seeded randomness -------===//
//
// The state every part of the emulation shares: the sticky error a fault
// sets, each host thread's last error, the documented names and strings of
// the error codes, and the run's seeded generator.
//
// Environment:
//   MOE_VIRTUAL_GPU_SEED=N  seeds every adversarial choice (stream delays,
//                           block order, ...); default 1. Runs with the same
//                           seed make the same choices.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Errors.h"
#include "VirtualGpu/Runtime.h"
#include "VirtualGpu/Memory.h"
#include "VirtualGpu/Streams.h"

#include "absl/strings/numbers.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace moe::rt::virtual_gpu {
namespace {

std::atomic<cudaError_t> sticky{cudaSuccess};
thread_local cudaError_t lastError = cudaSuccess;

/// The documented name and message of the codes the emulation returns.
struct ErrorText {
  cudaError_t code;
  const char *name;
  const char *message;
};

#define MOE_ERROR(code, message) {code, #code, message}
constexpr ErrorText kErrorTexts[] = {
    MOE_ERROR(cudaSuccess, "no error"),
    MOE_ERROR(cudaErrorInvalidValue, "invalid argument"),
    MOE_ERROR(cudaErrorMemoryAllocation, "out of memory"),
    MOE_ERROR(cudaErrorInitializationError, "initialization error"),
    MOE_ERROR(cudaErrorCudartUnloading, "driver shutting down"),
    MOE_ERROR(cudaErrorInvalidConfiguration,
              "invalid configuration argument"),
    MOE_ERROR(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    MOE_ERROR(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    MOE_ERROR(cudaErrorInvalidMemcpyDirection,
              "invalid copy direction for memcpy"),
    MOE_ERROR(cudaErrorInsufficientDriver,
              "CUDA driver version is insufficient for CUDA runtime version"),
    MOE_ERROR(cudaErrorInvalidDeviceFunction, "invalid device function"),
    MOE_ERROR(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    MOE_ERROR(cudaErrorInvalidDevice, "invalid device ordinal"),
    MOE_ERROR(cudaErrorInvalidKernelImage,
              "device kernel image is invalid"),
    MOE_ERROR(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    MOE_ERROR(cudaErrorIllegalState,
              "the operation cannot be performed in the present state"),
    MOE_ERROR(cudaErrorNotReady, "device not ready"),
    MOE_ERROR(cudaErrorIllegalAddress,
              "an illegal memory access was encountered"),
    MOE_ERROR(cudaErrorLaunchOutOfResources,
              "too many resources requested for launch"),
    MOE_ERROR(cudaErrorLaunchTimeout,
              "the launch timed out and was terminated"),
    MOE_ERROR(cudaErrorAssert, "device-side assert triggered"),
    MOE_ERROR(cudaErrorHardwareStackError, "hardware stack error"),
    MOE_ERROR(cudaErrorIllegalInstruction,
              "an illegal instruction was encountered"),
    MOE_ERROR(cudaErrorMisalignedAddress, "misaligned address"),
    MOE_ERROR(cudaErrorInvalidAddressSpace,
              "operation not supported on global/shared address space"),
    MOE_ERROR(cudaErrorInvalidPc, "invalid program counter"),
    MOE_ERROR(cudaErrorLaunchFailure, "unspecified launch failure"),
    MOE_ERROR(cudaErrorCooperativeLaunchTooLarge,
              "too many blocks in cooperative launch"),
    MOE_ERROR(cudaErrorNotPermitted, "operation not permitted"),
    MOE_ERROR(cudaErrorNotSupported, "operation not supported"),
    MOE_ERROR(cudaErrorUnknown, "unknown error"),
};
#undef MOE_ERROR

const ErrorText *findErrorText(cudaError_t code) {
  for (const ErrorText &text : kErrorTexts)
    if (text.code == code)
      return &text;
  return nullptr;
}

uint64_t readSeed() {
  const char *text = std::getenv("MOE_VIRTUAL_GPU_SEED");
  uint64_t seed = 1;
  if (text && !absl::SimpleAtoi(text, &seed)) {
    std::fprintf(stderr,
                 "virtual gpu: MOE_VIRTUAL_GPU_SEED '%s' is not a number; "
                 "using 1\n",
                 text);
    seed = 1;
  }
  return seed;
}

/// SplitMix64's output function: a bijective mix, so consecutive counters
/// give independent-looking words.
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

} // namespace

void fault(cudaError_t code, const std::string &message) {
  cudaError_t none = cudaSuccess;
  if (!sticky.compare_exchange_strong(none, code))
    return;
  std::fprintf(stderr, "virtual gpu: %s\n", message.c_str());
  // Communication streams holding their work back see the fault at once.
  notifyStreams();
}

void setLastError(cudaError_t code) { lastError = code; }

cudaError_t stickyError() { return sticky.load(); }

uint64_t randomBits() {
  static const uint64_t seed = readSeed();
  static std::atomic<uint64_t> drawn{0};
  return mix(seed + 0x9e3779b97f4a7c15ULL * ++drawn);
}

cudaError_t failed(cudaError_t code) {
  if (code != cudaSuccess && code != cudaErrorNotReady)
    lastError = code;
  return code;
}

cudaError_t checkCall() {
  if (!selectedDevice())
    return failed(cudaErrorNoDevice);
  return failed(sticky.load());
}

cudaError_t stickyOr(cudaError_t code) {
  cudaError_t error = sticky.load();
  return failed(error != cudaSuccess ? error : code);
}

} // namespace moe::rt::virtual_gpu

using namespace moe::rt::virtual_gpu;

extern "C" {

cudaError_t cudaGetLastError() {
  cudaError_t error = sticky.load();
  if (error != cudaSuccess)
    return error;
  error = lastError;
  lastError = cudaSuccess;
  return error;
}

/// Documented: destroys every allocation (pinned host memory too) and resets
/// the device's state, so that the next call starts afresh; the sticky error is
/// cleared with it (tests of faults run one after another in one process
/// through this). The streams stay: they hold no state of the device's beyond
/// their work, which is waited for first (skipped, if a fault is pending).
cudaError_t cudaDeviceReset() {
  if (!selectedDevice())
    return failed(cudaErrorNoDevice);
  synchronizeAllStreams();
  releaseAllMemory();
  releaseAllPinnedMemory();
  sticky = cudaSuccess;
  lastError = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaPeekAtLastError() {
  cudaError_t error = sticky.load();
  return error != cudaSuccess ? error : lastError;
}

const char *cudaGetErrorName(cudaError_t error) {
  const ErrorText *text = findErrorText(error);
  return text ? text->name : "unrecognized error code";
}

const char *cudaGetErrorString(cudaError_t error) {
  const ErrorText *text = findErrorText(error);
  return text ? text->message : "unrecognized error code";
}

} // extern "C"
