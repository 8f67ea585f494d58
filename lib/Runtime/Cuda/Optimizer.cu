//===- Optimizer.cu - Gradient norm and AdamW -----------------------------===//
//
// sumOfSquares: two stages in a fixed order, so that a gradient's norm is
// the same from run to run (no atomics): a grid-stride loop of at most
// kSumBlocks blocks accumulating in double per thread and a block tree into
// one partial per block, then one block adding the partials
// (addPartialsKernel). The order differs from the CPU's eight lanes:
// agreement to rounding.
//
// adamw: a grid-stride loop reproducing cpu::adamw operation for operation.
// The scalars (bias corrections in double, with step + 1) are computed on
// the host by the CPU's own expressions, and the element arithmetic uses
// the IEEE round-to-nearest intrinsics (__fmul_rn, ...), which nvcc never
// contracts into fused multiply-adds and which --use_fast_math leaves
// alone; with a CPU build that does not contract either (x86-64 without
// FMA flags), the update is bitwise the CPU's. The gradient is first
// multiplied by the clipping coefficient in fp32, as adamwScaled in
// lib/Runtime/Engine/Dispatch.cpp does (a coefficient of 1 leaves it
// unchanged there and here alike). With mixed precision's working copy,
// the updated parameter is also rounded to BF16 (nearest even) into it.
//
// adamwMany: the same element code over several tensors in one launch,
// each block taking chunks of kAdamwChunk elements of one tensor (found by
// a binary search of the tensors' first chunks), from a table the launch's
// stream uploads. A step check that failed leaves everything unwritten.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "BlockReduce.cuh"
#include "DeviceBuffer.h"
#include "Launch.h"
#include "PartialSums.cuh"
#include "SharedMemory.cuh"

#include "absl/strings/str_cat.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace moe::rt::cuda {
namespace {

/// The first stage's blocks at most: enough to fill an H200 several times
/// over, few enough for one block to add.
constexpr unsigned kSumBlocks = 1024;

__global__ void sumOfSquaresPartials(const float *g, int64_t n,
                                     double *partials) {
  MOE_BLOCK_SHARED(double, shared, kThreads);
  double mine = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    // The product of two floats is exact in double: fused or not, the
    // same value is added.
    double value = static_cast<double>(g[i]);
    mine += value * value;
  }
  double total = blockSum(mine, shared);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = total;
}

/// The per-call scalars of cpu::adamw, in fp32 as its element loop uses
/// them.
struct AdamwScalars {
  float stepSize;
  float bias2Sqrt;
  float decayFactor;
  float beta1, beta2, oneMinusBeta1, oneMinusBeta2;
  float eps;
  bool decays;
};

/// One element of cpu::adamw's loop.
__device__ inline void adamwElement(int64_t i, float *param, const float *grad,
                                    float scale, float *expAvg,
                                    float *expAvgSq, const AdamwScalars &s,
                                    uint16_t *working) {
  // Dispatch's scratch[i] = grad[i] * gradScale.
  float g = __fmul_rn(grad[i], scale);
  float p = param[i];
  if (s.decays)
    p = __fmul_rn(p, s.decayFactor);
  // m = beta1 * m + (1 - beta1) * g
  float m =
      __fadd_rn(__fmul_rn(s.beta1, expAvg[i]), __fmul_rn(s.oneMinusBeta1, g));
  // v = beta2 * v + ((1 - beta2) * g) * g
  float v = __fadd_rn(__fmul_rn(s.beta2, expAvgSq[i]),
                      __fmul_rn(__fmul_rn(s.oneMinusBeta2, g), g));
  // denom = sqrt(v) / sqrt(bias2) + eps
  float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias2Sqrt), s.eps);
  // p -= stepSize * (m / denom)
  p = __fsub_rn(p, __fmul_rn(s.stepSize, __fdiv_rn(m, denom)));
  expAvg[i] = m;
  expAvgSq[i] = v;
  param[i] = p;
  if (working)
    working[i] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
}

__global__ void adamwKernel(float *param, const float *grad,
                            const float *gradScale, float *expAvg,
                            float *expAvgSq, int64_t n, AdamwScalars s,
                            uint16_t *working, const StepCheck *check) {
  // A failed check leaves the weights and the state as they were.
  if (check && check->kind != StepCheck::Passed)
    return;
  float scale = *gradScale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    adamwElement(i, param, grad, scale, expAvg, expAvgSq, s, working);
}

/// Elements of one tensor a block of adamwManyKernel updates at a time.
constexpr int64_t kAdamwChunk = 16 * kThreads;

/// A tensor of adamwManyKernel with its scalars (its own weight decay).
struct AdamwTask {
  AdamwTensor tensor;
  AdamwScalars scalars;
};

/// Chunk c of the tensors' chunks (tensor k has chunks [firstChunk[k],
/// firstChunk[k + 1])) per block in turn.
__global__ void adamwManyKernel(const AdamwTask *tasks,
                                const int64_t *firstChunk, int64_t count,
                                const float *gradScale,
                                const StepCheck *check) {
  if (check && check->kind != StepCheck::Passed)
    return;
  float scale = *gradScale;
  int64_t chunks = firstChunk[count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    // The last tensor whose first chunk is at most c.
    int64_t lo = 0, hi = count - 1;
    while (lo < hi) {
      int64_t mid = (lo + hi + 1) / 2;
      if (firstChunk[mid] <= c)
        lo = mid;
      else
        hi = mid - 1;
    }
    const AdamwTask &task = tasks[lo];
    const AdamwTensor &t = task.tensor;
    int64_t begin = (c - firstChunk[lo]) * kAdamwChunk;
    int64_t end = begin + kAdamwChunk < t.n ? begin + kAdamwChunk : t.n;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      adamwElement(i, t.param, t.grad, scale, t.expAvg, t.expAvgSq,
                   task.scalars, t.working);
  }
}

/// cpu::adamw's scalars, by its expressions: double as PyTorch's Python
/// floats, then rounded to fp32.
AdamwScalars adamwScalars(float lr, float beta1, float beta2, float eps,
                          float weightDecay, int64_t step) {
  double t = static_cast<double>(step + 1);
  double bias1 = 1.0 - std::pow(static_cast<double>(beta1), t);
  double bias2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  AdamwScalars s;
  s.stepSize = static_cast<float>(static_cast<double>(lr) / bias1);
  s.bias2Sqrt = static_cast<float>(std::sqrt(bias2));
  s.decayFactor = static_cast<float>(
      1.0 - static_cast<double>(lr) * static_cast<double>(weightDecay));
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.oneMinusBeta1 = 1.0f - beta1;
  s.oneMinusBeta2 = 1.0f - beta2;
  s.eps = eps;
  s.decays = weightDecay != 0.0f;
  return s;
}

} // namespace

absl::Status sumOfSquares(const float *g, int64_t n, double *sum,
                          cudaStream_t stream) {
  if (n < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("sumOfSquares: n must be >= 0, found ", n));
  if (n == 0)
    return absl::OkStatus();
  unsigned blocks = std::min(gridFor(n), kSumBlocks);
  MOE_DEVICE_BUFFER(double, partials, blocks, stream);
  MOE_CUDA_TRY(launch("sumOfSquares", sumOfSquaresPartials, blocks, kThreads, 0,
                      stream, g, n, partials.get()));
  return launch("sumOfSquares (partials)", addPartialsKernel, 1, kThreads, 0,
                stream, partials.get(), blocks, sum);
}

absl::Status adamw(float *param, const float *grad, const float *gradScale,
                   float *expAvg, float *expAvgSq, int64_t n, float lr,
                   float beta1, float beta2, float eps, float weightDecay,
                   int64_t step, cudaStream_t stream, uint16_t *working,
                   const StepCheck *check) {
  if (n < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("adamw: n must be >= 0, found ", n));
  if (n == 0)
    return absl::OkStatus();
  AdamwScalars s = adamwScalars(lr, beta1, beta2, eps, weightDecay, step);
  return launch("adamw", adamwKernel, gridFor(n), kThreads, 0, stream, param,
                grad, gradScale, expAvg, expAvgSq, n, s, working, check);
}

absl::Status adamwMany(const AdamwTensor *tensors, int64_t count,
                       const float *gradScale, float lr, float beta1,
                       float beta2, float eps, int64_t step,
                       cudaStream_t stream, const StepCheck *check) {
  if (count < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("adamwMany: count must be >= 0, found ", count));
  std::vector<AdamwTask> tasks;
  std::vector<int64_t> firstChunk = {0};
  for (int64_t k = 0; k < count; ++k) {
    const AdamwTensor &t = tensors[k];
    if (t.n < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "adamwMany: tensor ", k, " has n = ", t.n, ", must be >= 0"));
    // Empty tensors take no chunk (and no task).
    if (t.n == 0)
      continue;
    tasks.push_back(
        {t, adamwScalars(lr, beta1, beta2, eps, t.weightDecay, step)});
    firstChunk.push_back(firstChunk.back() +
                         (t.n + kAdamwChunk - 1) / kAdamwChunk);
  }
  if (tasks.empty())
    return absl::OkStatus();
  // The table travels with the launch's stream (staged from pageable
  // memory: the call does not wait for it).
  int64_t taskBytes = static_cast<int64_t>(tasks.size() * sizeof(AdamwTask));
  int64_t chunkBytes =
      static_cast<int64_t>(firstChunk.size() * sizeof(int64_t));
  MOE_DEVICE_BUFFER(unsigned char, table, taskBytes + chunkBytes, stream);
  MOE_CUDA_OK(cudaMemcpyAsync(table.get(), tasks.data(), taskBytes,
                              cudaMemcpyHostToDevice, stream));
  MOE_CUDA_OK(cudaMemcpyAsync(table.get() + taskBytes, firstChunk.data(),
                              chunkBytes, cudaMemcpyHostToDevice, stream));
  int64_t chunks = firstChunk.back();
  unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>(chunks, 65535 * 16));
  return launch("adamwMany", adamwManyKernel, blocks, kThreads, 0, stream,
                reinterpret_cast<const AdamwTask *>(table.get()),
                reinterpret_cast<const int64_t *>(table.get() + taskBytes),
                static_cast<int64_t>(tasks.size()), gradScale, check);
}

} // namespace moe::rt::cuda
