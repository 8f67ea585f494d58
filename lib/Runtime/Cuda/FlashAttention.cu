//===- FlashAttention.cu - tiled BF16 causal attention on tensor cores ----===//
//
// The device side of FlashAttentionBlocks.h: the kernels over DeviceSimt
// (WMMA BF16 m16n16k16 with fp32 accumulation, sm_80 and later; it runs as
// mma.sync on sm_90 too), and their launches. Each kernel
// is one block of kBlockThreads per tile with its tiles in dynamic shared
// memory (up to ~123 KiB at head dim 128, within sm_80's 163 KiB), so the
// launches raise the kernels' shared-memory limit first.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "AttentionShape.h"
#include "DeviceBuffer.h"
#include "DeviceSimt.cuh"
#include "FlashAttentionBlocks.h"
#include "Launch.h"
#include "SharedMemory.cuh"

#include "absl/strings/str_cat.h"

#include <cmath>

namespace moe::rt::cuda {
namespace {

using flash::kBlockThreads;
using flash::kTile;

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    flashForwardKernel(flash::ForwardArgs args) {
  MOE_DYNAMIC_SHARED(unsigned char, smem, 128);
  flash::forwardBlock<D>(DeviceSimt{smem}, args);
}

__global__ void __launch_bounds__(kBlockThreads)
    flashRowDotKernel(flash::BackwardArgs args) {
  flash::rowDotBlock(DeviceSimt{nullptr}, args);
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    flashKeyValueGradKernel(flash::BackwardArgs args) {
  MOE_DYNAMIC_SHARED(unsigned char, smem, 128);
  flash::keyValueGradBlock<D>(DeviceSimt{smem}, args);
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    flashQueryGradKernel(flash::BackwardArgs args) {
  MOE_DYNAMIC_SHARED(unsigned char, smem, 128);
  flash::queryGradBlock<D>(DeviceSimt{smem}, args);
}

/// Launches `kernel` over `grid` with `bytes` of dynamic shared memory,
/// raising its limit first (above 48 KiB a kernel must opt in).
template <typename Args>
absl::Status launchTiles(void (*kernel)(Args), dim3 grid, size_t bytes,
                         const Args &args, cudaStream_t stream,
                         const char *what) {
  // The runtime API's own form, which nvcc's template overload calls: a
  // host compiler (the virtual GPU) sees only this one.
  cudaError_t error = cudaFuncSetAttribute(
      reinterpret_cast<const void *>(kernel),
      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (error != cudaSuccess)
    return cudaStatus(error, what);
  return launch(what, kernel, grid, kBlockThreads, bytes, stream, args);
}

/// The padded head dim of the kernel that runs headDim: 64 or 128.
int paddedDim(int64_t headDim) { return headDim <= 64 ? 64 : 128; }

absl::Status checkShape(const char *what, int64_t B, int64_t S, int64_t heads,
                        int64_t kvHeads, int64_t headDim) {
  if (absl::Status status = checkAttentionShape(
          what, B, S, heads, kvHeads, headDim, kFlashAttentionMaxHeadDim);
      !status.ok())
    return status;
  // Grid y and z are 16-bit.
  if (heads > 65535 || B > 65535)
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", heads, " heads and batch ", B, " exceed a grid's 65535"));
  return absl::OkStatus();
}

flash::Shape makeShape(int64_t B, int64_t S, int64_t heads, int64_t kvHeads,
                       int64_t headDim) {
  float scale = 1.0f / std::sqrt(static_cast<float>(headDim));
  return {B, S, heads, kvHeads, headDim, scale, scale * flash::kLog2e};
}

unsigned tilesOf(int64_t S) {
  return static_cast<unsigned>((S + kTile - 1) / kTile);
}

} // namespace

bool flashAttentionSupports(int64_t headDim) {
  return headDim >= 0 && headDim <= kFlashAttentionMaxHeadDim;
}

absl::Status flashAttentionForward(const uint16_t *q, const uint16_t *k,
                                   const uint16_t *v, uint16_t *out, float *lse,
                                   int64_t B, int64_t S, int64_t heads,
                                   int64_t kvHeads, int64_t headDim,
                                   cudaStream_t stream) {
  if (absl::Status status =
          checkShape("flashAttentionForward", B, S, heads, kvHeads, headDim);
      !status.ok())
    return status;
  if (B == 0 || S == 0 || heads == 0 || headDim == 0)
    return absl::OkStatus();
  flash::ForwardArgs args{q,   k,   v,
                          out, lse, makeShape(B, S, heads, kvHeads, headDim)};
  dim3 grid(tilesOf(S), static_cast<unsigned>(heads), static_cast<unsigned>(B));
  if (paddedDim(headDim) == 64)
    return launchTiles(flashForwardKernel<64>, grid,
                       flash::ForwardLayout<64>::kBytes, args, stream,
                       "flashAttentionForward");
  return launchTiles(flashForwardKernel<128>, grid,
                     flash::ForwardLayout<128>::kBytes, args, stream,
                     "flashAttentionForward");
}

uint64_t flashAttentionBackwardWorkspaceBytes(int64_t B, int64_t S,
                                              int64_t heads) {
  // The memory plan counts the same (Workspace.h).
  return attentionWorkspaceBytes(B, S, heads);
}

absl::Status flashAttentionBackward(const uint16_t *dout, const uint16_t *q,
                                    const uint16_t *k, const uint16_t *v,
                                    const uint16_t *out, const float *lse,
                                    uint16_t *dq, uint16_t *dk, uint16_t *dv,
                                    int64_t B, int64_t S, int64_t heads,
                                    int64_t kvHeads, int64_t headDim,
                                    float *workspace, cudaStream_t stream) {
  if (absl::Status status =
          checkShape("flashAttentionBackward", B, S, heads, kvHeads, headDim);
      !status.ok())
    return status;
  if (B == 0 || S == 0 || kvHeads == 0 || headDim == 0)
    return absl::OkStatus();
  if (heads == 0) {
    // No query head reads a key: dk and dv are zero, as on the CPU.
    size_t bytes = static_cast<size_t>(B * S * kvHeads * headDim) * 2;
    MOE_CUDA_OK(cudaMemsetAsync(dk, 0, bytes, stream));
    MOE_CUDA_OK(cudaMemsetAsync(dv, 0, bytes, stream));
    return absl::OkStatus();
  }
  if (workspace == nullptr)
    return absl::InvalidArgumentError(
        "flashAttentionBackward: workspace is null (needs "
        "flashAttentionBackwardWorkspaceBytes)");
  flash::BackwardArgs args{dout,
                           q,
                           k,
                           v,
                           out,
                           lse,
                           workspace,
                           dq,
                           dk,
                           dv,
                           makeShape(B, S, heads, kvHeads, headDim)};
  int64_t rows = B * heads * S;
  int64_t rowBlocks = (rows + flash::kWarps - 1) / flash::kWarps;
  if (rowBlocks > 0x7fffffff)
    return absl::InvalidArgumentError(
        absl::StrCat("flashAttentionBackward: ", rows, " query rows"));
  MOE_CUDA_TRY(launch("flashAttentionBackward (dout . out)", flashRowDotKernel,
                      static_cast<unsigned>(rowBlocks), kBlockThreads, 0,
                      stream, args));
  dim3 keyGrid(tilesOf(S), static_cast<unsigned>(kvHeads),
               static_cast<unsigned>(B));
  dim3 queryGrid(tilesOf(S), static_cast<unsigned>(heads),
                 static_cast<unsigned>(B));
  if (paddedDim(headDim) == 64) {
    MOE_CUDA_TRY(launchTiles(flashKeyValueGradKernel<64>, keyGrid,
                             flash::KeyValueGradLayout<64>::kBytes, args,
                             stream, "flashAttentionBackward (dk, dv)"));
    return launchTiles(flashQueryGradKernel<64>, queryGrid,
                       flash::QueryGradLayout<64>::kBytes, args, stream,
                       "flashAttentionBackward (dq)");
  }
  MOE_CUDA_TRY(launchTiles(flashKeyValueGradKernel<128>, keyGrid,
                           flash::KeyValueGradLayout<128>::kBytes, args, stream,
                           "flashAttentionBackward (dk, dv)"));
  return launchTiles(flashQueryGradKernel<128>, queryGrid,
                     flash::QueryGradLayout<128>::kBytes, args, stream,
                     "flashAttentionBackward (dq)");
}

} // namespace moe::rt::cuda
