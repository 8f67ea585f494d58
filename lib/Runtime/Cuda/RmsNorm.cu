//===- RmsNorm.cu - RMSNorm (HF MixtralRMSNorm) and its VJP ---------------===//
//
// One block per row; the row statistics accumulate in double, as on the CPU.
// The weight gradient sums over rows in two fixed-order stages
// (WeightGradBlocks.h: chunks of rows, then the chunks), reading each row's
// normaliser from a scratch array the row kernel wrote.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "BlockReduce.cuh"
#include "DeviceSimt.cuh"
#include "Launch.h"
#include "SharedMemory.cuh"
#include "Storage.cuh"
#include "WeightGradBlocks.h"

namespace moe::rt::cuda {
namespace {

// S: the storage type of x, w, y, dy and dx (Storage.cuh): float, or BF16
// bits. dw is fp32.

/// 1 / sqrt(mean(x^2) + eps) of the row, as cpu's rmsReciprocal.
template <typename S>
__device__ float rmsReciprocal(const S *x, int64_t H, float eps,
                               double *shared) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    float xi = loadValue(x + i);
    sum += static_cast<double>(xi) * xi;
  }
  sum = blockSum(sum, shared);
  double mean = H > 0 ? sum / static_cast<double>(H) : 0.0;
  return static_cast<float>(1.0 / sqrt(mean + static_cast<double>(eps)));
}

template <typename S>
__global__ void rmsNormForwardKernel(const S *x, const S *w, S *y, int64_t H,
                                     float eps) {
  MOE_BLOCK_SHARED(double, shared, kThreads);
  const S *xr = x + blockIdx.x * H;
  S *yr = y + blockIdx.x * H;
  float r = rmsReciprocal(xr, H, eps, shared);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    storeValue(yr + i, loadValue(w + i) * (loadValue(xr + i) * r));
}

template <typename S>
__global__ void rmsNormBackwardRowsKernel(const S *dy, const S *x, const S *w,
                                          S *dx, float *reciprocals, int64_t H,
                                          float eps) {
  MOE_BLOCK_SHARED(double, shared, kThreads);
  int64_t row = blockIdx.x;
  const S *xr = x + row * H, *dyr = dy + row * H;
  S *dxr = dx + row * H;
  float r = rmsReciprocal(xr, H, eps, shared);
  double dot = 0.0;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    dot += static_cast<double>(loadValue(dyr + i) * loadValue(w + i)) *
           (loadValue(xr + i) * r);
  dot = blockSum(dot, shared);
  float meanDot = H > 0 ? static_cast<float>(dot / static_cast<double>(H)) : 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    float xhat = loadValue(xr + i) * r;
    storeValue(dxr + i,
               r * (loadValue(dyr + i) * loadValue(w + i) - xhat * meanDot));
  }
  if (threadIdx.x == 0)
    reciprocals[row] = r;
}

template <typename S>
__global__ void __launch_bounds__(weightgrad::kColumns)
    rmsNormWeightPartialsKernel(weightgrad::RmsNormWeightGradArgs<S> args) {
  weightgrad::rmsNormWeightPartialsBlock(DeviceSimt{nullptr}, args);
}

template <typename S>
__global__ void __launch_bounds__(weightgrad::kColumns)
    rmsNormWeightSumKernel(weightgrad::RmsNormWeightGradArgs<S> args) {
  weightgrad::rmsNormWeightSumBlock(DeviceSimt{nullptr}, args);
}

/// Rows are blocks: the grid's x dimension holds 2^31 - 1 of them.
absl::Status checkRows(int64_t T) {
  if (T > 0x7fffffff)
    return absl::InvalidArgumentError(
        "rmsnorm: more than 2^31 - 1 rows in one call");
  return absl::OkStatus();
}

template <typename S>
absl::Status rmsNormForwardOn(const S *x, const S *w, S *y, int64_t T,
                              int64_t H, float eps, cudaStream_t stream) {
  if (absl::Status status = checkRows(T); !status.ok() || T == 0)
    return status;
  return launch("rmsNormForward", rmsNormForwardKernel<S>,
                static_cast<unsigned>(T), kThreads, 0, stream, x, w, y, H, eps);
}

template <typename S>
absl::Status rmsNormBackwardOn(const S *dy, const S *x, const S *w, S *dx,
                               float *dw, int64_t T, int64_t H, float eps,
                               cudaStream_t stream) {
  if (absl::Status status = checkRows(T); !status.ok())
    return status;
  if (T == 0)
    return fill(dw, 0.0f, H, stream);
  int64_t chunks = weightgrad::rowChunks(T);
  int64_t columnTiles = (H + weightgrad::kColumns - 1) / weightgrad::kColumns;
  if (chunks > 65535 || columnTiles > 0x7fffffff)
    return absl::InvalidArgumentError(
        "rmsnorm: too many rows or columns for the weight gradient's grid");
  float *reciprocals = nullptr;
  double *partials = nullptr;
  MOE_CUDA_OK(cudaMallocAsync(reinterpret_cast<void **>(&reciprocals),
                              T * sizeof(float), stream));
  MOE_CUDA_OK(cudaMallocAsync(reinterpret_cast<void **>(&partials),
                              chunks * H * sizeof(double), stream));
  // Each kernel reads what the one before wrote: the first failed launch
  // ends the chain, and is reported once the scratch is freed.
  weightgrad::RmsNormWeightGradArgs<S> args{dy, x, reciprocals, partials, dw,
                                            T,  H};
  dim3 partialsGrid(static_cast<unsigned>(columnTiles),
                    static_cast<unsigned>(chunks));
  absl::Status status = [&] {
    MOE_CUDA_TRY(launch("rmsNormBackward (rows)", rmsNormBackwardRowsKernel<S>,
                        static_cast<unsigned>(T), kThreads, 0, stream, dy, x, w,
                        dx, reciprocals, H, eps));
    MOE_CUDA_TRY(launch("rmsNormBackward (weight partials)",
                        rmsNormWeightPartialsKernel<S>, partialsGrid,
                        weightgrad::kColumns, 0, stream, args));
    return launch("rmsNormBackward (weight sums)", rmsNormWeightSumKernel<S>,
                  static_cast<unsigned>(columnTiles), weightgrad::kColumns, 0,
                  stream, args);
  }();
  MOE_CUDA_OK(cudaFreeAsync(partials, stream));
  MOE_CUDA_OK(cudaFreeAsync(reciprocals, stream));
  return status;
}

} // namespace

absl::Status rmsNormForward(const float *x, const float *w, float *y, int64_t T,
                            int64_t H, float eps, cudaStream_t stream) {
  return rmsNormForwardOn(x, w, y, T, H, eps, stream);
}

absl::Status rmsNormForward(const uint16_t *x, const uint16_t *w, uint16_t *y,
                            int64_t T, int64_t H, float eps,
                            cudaStream_t stream) {
  return rmsNormForwardOn(x, w, y, T, H, eps, stream);
}

absl::Status rmsNormBackward(const float *dy, const float *x, const float *w,
                             float *dx, float *dw, int64_t T, int64_t H,
                             float eps, cudaStream_t stream) {
  return rmsNormBackwardOn(dy, x, w, dx, dw, T, H, eps, stream);
}

absl::Status rmsNormBackward(const uint16_t *dy, const uint16_t *x,
                             const uint16_t *w, uint16_t *dx, float *dw,
                             int64_t T, int64_t H, float eps,
                             cudaStream_t stream) {
  return rmsNormBackwardOn(dy, x, w, dx, dw, T, H, eps, stream);
}

} // namespace moe::rt::cuda
