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
#include "WeightGradBlocks.h"

namespace moe::rt::cuda {
namespace {

/// 1 / sqrt(mean(x^2) + eps) of the row, as cpu's rmsReciprocal.
__device__ float rmsReciprocal(const float *x, int64_t H, float eps,
                               double *shared) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    sum += static_cast<double>(x[i]) * x[i];
  sum = blockSum(sum, shared);
  double mean = H > 0 ? sum / static_cast<double>(H) : 0.0;
  return static_cast<float>(1.0 / sqrt(mean + static_cast<double>(eps)));
}

__global__ void rmsNormForwardKernel(const float *x, const float *w, float *y,
                                     int64_t H, float eps) {
  __shared__ double shared[kThreads];
  const float *xr = x + blockIdx.x * H;
  float *yr = y + blockIdx.x * H;
  float r = rmsReciprocal(xr, H, eps, shared);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    yr[i] = w[i] * (xr[i] * r);
}

__global__ void rmsNormBackwardRowsKernel(const float *dy, const float *x,
                                          const float *w, float *dx,
                                          float *reciprocals, int64_t H,
                                          float eps) {
  __shared__ double shared[kThreads];
  int64_t row = blockIdx.x;
  const float *xr = x + row * H, *dyr = dy + row * H;
  float *dxr = dx + row * H;
  float r = rmsReciprocal(xr, H, eps, shared);
  double dot = 0.0;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    dot += static_cast<double>(dyr[i] * w[i]) * (xr[i] * r);
  dot = blockSum(dot, shared);
  float meanDot = H > 0 ? static_cast<float>(dot / static_cast<double>(H)) : 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    float xhat = xr[i] * r;
    dxr[i] = r * (dyr[i] * w[i] - xhat * meanDot);
  }
  if (threadIdx.x == 0)
    reciprocals[row] = r;
}

__global__ void __launch_bounds__(weightgrad::kColumns)
    rmsNormWeightPartialsKernel(weightgrad::RmsNormWeightGradArgs args) {
  weightgrad::rmsNormWeightPartialsBlock(DeviceSimt{nullptr}, args);
}

__global__ void __launch_bounds__(weightgrad::kColumns)
    rmsNormWeightSumKernel(weightgrad::RmsNormWeightGradArgs args) {
  weightgrad::rmsNormWeightSumBlock(DeviceSimt{nullptr}, args);
}

/// Rows are blocks: the grid's x dimension holds 2^31 - 1 of them.
absl::Status checkRows(int64_t T) {
  if (T > 0x7fffffff)
    return absl::InvalidArgumentError(
        "rmsnorm: more than 2^31 - 1 rows in one call");
  return absl::OkStatus();
}

} // namespace

absl::Status rmsNormForward(const float *x, const float *w, float *y,
                            int64_t T, int64_t H, float eps,
                            cudaStream_t stream) {
  if (absl::Status status = checkRows(T); !status.ok() || T == 0)
    return status;
  rmsNormForwardKernel<<<static_cast<unsigned>(T), kThreads, 0, stream>>>(
      x, w, y, H, eps);
  return launched("rmsNormForward");
}

absl::Status rmsNormBackward(const float *dy, const float *x, const float *w,
                             float *dx, float *dw, int64_t T, int64_t H,
                             float eps, cudaStream_t stream) {
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
  rmsNormBackwardRowsKernel<<<static_cast<unsigned>(T), kThreads, 0, stream>>>(
      dy, x, w, dx, reciprocals, H, eps);
  // Each kernel runs after the one before on the stream; the first failed
  // launch is reported.
  absl::Status status = launched("rmsNormBackward (rows)");
  weightgrad::RmsNormWeightGradArgs args{dy, x, reciprocals, partials, dw, T, H};
  dim3 partialsGrid(static_cast<unsigned>(columnTiles),
                    static_cast<unsigned>(chunks));
  rmsNormWeightPartialsKernel<<<partialsGrid, weightgrad::kColumns, 0,
                                stream>>>(args);
  absl::Status partialSums = launched("rmsNormBackward (weight partials)");
  rmsNormWeightSumKernel<<<static_cast<unsigned>(columnTiles),
                           weightgrad::kColumns, 0, stream>>>(args);
  absl::Status sums = launched("rmsNormBackward (weight sums)");
  MOE_CUDA_OK(cudaFreeAsync(partials, stream));
  MOE_CUDA_OK(cudaFreeAsync(reciprocals, stream));
  if (!status.ok())
    return status;
  return partialSums.ok() ? sums : partialSums;
}

} // namespace moe::rt::cuda
