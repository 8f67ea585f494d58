//===- Rope.cu - rotary position embedding (rotate-half) ------------------===//
//
// As on the CPU, the angles are evaluated in double and their cos and sin
// rounded once to fp32: a [S, headDim / 2] table per call, then one thread
// per rotated pair.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "Launch.h"
#include "Storage.cuh"

namespace moe::rt::cuda {
namespace {

__global__ void ropeTableKernel(float *cosines, float *sines, int64_t S,
                                int64_t headDim, float theta) {
  int64_t half = headDim / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < S * half;
       i += int64_t(blockDim.x) * gridDim.x) {
    int64_t p = i / half, k = i % half;
    double inverseFrequency =
        pow(static_cast<double>(theta),
            -2.0 * static_cast<double>(k) / static_cast<double>(headDim));
    double angle = static_cast<double>(p) * inverseFrequency;
    cosines[i] = static_cast<float>(cos(angle));
    sines[i] = static_cast<float>(sin(angle));
  }
}

/// Rotates pair (k, k + half) of every head by +angle (sign 1) or -angle
/// (the transpose). A pair is read before it is written: y may alias x.
template <typename Storage>
__global__ void ropeRotateKernel(const Storage *x, Storage *y,
                                 const float *cosines, const float *sines,
                                 int64_t B, int64_t S, int64_t heads,
                                 int64_t headDim, float sign) {
  int64_t half = headDim / 2;
  int64_t pairs = B * S * heads * half;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pairs;
       i += int64_t(blockDim.x) * gridDim.x) {
    int64_t k = i % half;
    int64_t row = i / half; // (b * S + s) * heads + h
    int64_t s = (row / heads) % S;
    int64_t base = row * headDim;
    float c = cosines[s * half + k], sn = sign * sines[s * half + k];
    float lo = loadValue(x + base + k), hi = loadValue(x + base + k + half);
    storeValue(y + base + k, lo * c - hi * sn);
    storeValue(y + base + k + half, hi * c + lo * sn);
    // An odd head dimension leaves its last element as it is (the CPU's
    // rule); the pair with k = 0 copies it.
    if (headDim % 2 != 0 && k == 0)
      y[base + headDim - 1] = x[base + headDim - 1];
  }
}

template <typename Storage>
absl::Status rotate(const Storage *x, Storage *y, int64_t B, int64_t S,
                    int64_t heads, int64_t headDim, float theta, float sign,
                    cudaStream_t stream, const char *what) {
  int64_t half = headDim / 2;
  if (B * S * heads * half == 0)
    return absl::OkStatus();
  float *table = nullptr;
  MOE_CUDA_OK(cudaMallocAsync(reinterpret_cast<void **>(&table),
                              2 * S * half * sizeof(float), stream));
  // The rotation reads the table: it is not launched when the table's
  // launch failed. The table is freed either way.
  absl::Status status = [&] {
    MOE_CUDA_TRY(launch(what, ropeTableKernel, gridFor(S * half), kThreads, 0,
                        stream, table, table + S * half, S, headDim, theta));
    return launch(what, ropeRotateKernel<Storage>,
                  gridFor(B * S * heads * half), kThreads, 0, stream, x, y,
                  table, table + S * half, B, S, heads, headDim, sign);
  }();
  MOE_CUDA_OK(cudaFreeAsync(table, stream));
  return status;
}

} // namespace

absl::Status ropeForward(const float *x, float *y, int64_t B, int64_t S,
                         int64_t heads, int64_t headDim, float theta,
                         cudaStream_t stream) {
  return rotate(x, y, B, S, heads, headDim, theta, 1.0f, stream,
                "ropeForward");
}

absl::Status ropeForward(const uint16_t *x, uint16_t *y, int64_t B, int64_t S,
                         int64_t heads, int64_t headDim, float theta,
                         cudaStream_t stream) {
  return rotate(x, y, B, S, heads, headDim, theta, 1.0f, stream,
                "ropeForward (bf16)");
}

absl::Status ropeBackward(const float *dy, float *dx, int64_t B, int64_t S,
                          int64_t heads, int64_t headDim, float theta,
                          cudaStream_t stream) {
  return rotate(dy, dx, B, S, heads, headDim, theta, -1.0f, stream,
                "ropeBackward");
}

absl::Status ropeBackward(const uint16_t *dy, uint16_t *dx, int64_t B,
                          int64_t S, int64_t heads, int64_t headDim,
                          float theta, cudaStream_t stream) {
  return rotate(dy, dx, B, S, heads, headDim, theta, -1.0f, stream,
                "ropeBackward (bf16)");
}

} // namespace moe::rt::cuda
