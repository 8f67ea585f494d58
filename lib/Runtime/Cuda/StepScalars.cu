//===- StepScalars.cu - a step's scalars and checks on the device ---------===//
//
// The scalars the CPU computes on the host between kernels (a loss from its
// sums, the global norm from its squares, the clipping coefficient, the
// loss's weighted sum) are one-thread kernels here calling the same
// semantics:: functions, so a step never waits for the stream to learn
// them; the host reads the few it reports when the step ends. Checks record
// their first failure in the step's StepCheck the same way.
//
// countTargets is a grid-stride loop with integer atomics (a count and the
// least bad position, FirstBadId.cuh), which give the same result in any
// order.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"
#include "moe/Runtime/StepSemantics.h"

#include "FirstBadId.cuh"
#include "Launch.h"

#include "absl/strings/str_cat.h"


namespace moe::rt::cuda {
namespace {

__global__ void countTargetsKernel(const int32_t *targets, int64_t T, int64_t V,
                                   unsigned long long *count,
                                   unsigned long long *firstBad) {
  unsigned long long mine = 0;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < T;
       t += int64_t(blockDim.x) * gridDim.x) {
    int32_t id = targets[t];
    // As engine::checkTargets: negative ids are ignored, ids >= V are bad.
    if (id >= V)
      noteBadId(firstBad, t);
    mine += id >= 0 && id < V;
  }
  if (mine)
    atomicAdd(count, mine);
}

__global__ void crossEntropyMeanKernel(const double *sum,
                                       const unsigned long long *count,
                                       float *loss) {
  *loss = semantics::crossEntropyMean(*sum, static_cast<int64_t>(*count));
}

__global__ void auxLossKernel(const unsigned long long *count,
                              const double *probSum, int64_t E, int64_t tokens,
                              float *loss) {
  *loss = semantics::auxLossFromStatistics(count, probSum, E, tokens);
}

__global__ void normFromSquaresKernel(const double *squares, int64_t n,
                                      float *norm) {
  *norm = semantics::normFromSquares(squares, static_cast<size_t>(n));
}

__global__ void clipCoefficientKernel(float maxNorm, const float *norm,
                                      float *coefficient) {
  *coefficient = semantics::clipCoefficient(maxNorm, *norm);
}

/// The terms of a weighted sum, passed by value (kernel parameters).
struct WeightedTerms {
  const float *values[kMaxWeightedTerms];
  float coefficients[kMaxWeightedTerms];
  int64_t n;
};

__global__ void weightedSumKernel(WeightedTerms terms, float *sum) {
  float values[kMaxWeightedTerms];
  for (int64_t i = 0; i < terms.n; ++i)
    values[i] = *terms.values[i];
  *sum = semantics::weightedSum(terms.coefficients, values,
                                static_cast<size_t>(terms.n));
}

__global__ void recordBadIdKernel(const int64_t *firstBad, const int32_t *ids,
                                  StepCheck::Kind kind, uint32_t instruction,
                                  uint32_t idsBuffer, int64_t limit,
                                  StepCheck *check) {
  int64_t position = *firstBad;
  if (position < 0 || check->kind != StepCheck::Passed)
    return;
  check->kind = kind;
  check->instruction = instruction;
  check->idsBuffer = idsBuffer;
  check->id = ids[position];
  check->position = position;
  check->limit = limit;
}

__global__ void recordIfNotFiniteKernel(const float *value,
                                        StepCheck::Kind kind,
                                        uint32_t instruction,
                                        StepCheck *check) {
  float v = *value;
  if (semantics::isFinite(v) || check->kind != StepCheck::Passed)
    return;
  check->kind = kind;
  check->instruction = instruction;
  check->value = v;
}

} // namespace

absl::Status countTargets(const int32_t *targets, int64_t T, int64_t V,
                          unsigned long long *count, int64_t *firstBad,
                          cudaStream_t stream) {
  if (T < 0 || V < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "countTargets: T and V must be >= 0, found ", T, " and ", V));
  auto *bad = reinterpret_cast<unsigned long long *>(firstBad);
  MOE_CUDA_OK(cudaMemsetAsync(count, 0, sizeof(*count), stream));
  MOE_CUDA_TRY(
      launch("countTargets", startFirstBadKernel, 1, 1, 0, stream, bad));
  if (T > 0)
    MOE_CUDA_TRY(launch("countTargets", countTargetsKernel, gridFor(T),
                        kThreads, 0, stream, targets, T, V, count, bad));
  return launch("countTargets", finishFirstBadKernel, 1, 1, 0, stream, bad);
}

absl::Status crossEntropyMean(const double *sum,
                              const unsigned long long *count, float *loss,
                              cudaStream_t stream) {
  return launch("crossEntropyMean", crossEntropyMeanKernel, 1, 1, 0, stream,
                sum, count, loss);
}

absl::Status auxLossFromStatistics(const unsigned long long *count,
                                   const double *probSum, int64_t E,
                                   int64_t tokens, float *loss,
                                   cudaStream_t stream) {
  if (E < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("auxLossFromStatistics: E must be >= 1, found ", E));
  return launch("auxLossFromStatistics", auxLossKernel, 1, 1, 0, stream, count,
                probSum, E, tokens, loss);
}

absl::Status normFromSquares(const double *squares, int64_t n, float *norm,
                             cudaStream_t stream) {
  if (n < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("normFromSquares: n must be >= 0, found ", n));
  return launch("normFromSquares", normFromSquaresKernel, 1, 1, 0, stream,
                squares, n, norm);
}

absl::Status clipCoefficient(float maxNorm, const float *norm,
                             float *coefficient, cudaStream_t stream) {
  return launch("clipCoefficient", clipCoefficientKernel, 1, 1, 0, stream,
                maxNorm, norm, coefficient);
}

absl::Status weightedSum(const float *const *values, const float *coefficients,
                         int64_t n, float *sum, cudaStream_t stream) {
  if (n < 0 || n > kMaxWeightedTerms)
    return absl::InvalidArgumentError(
        absl::StrCat("weightedSum: the terms must be in [0, ",
                     kMaxWeightedTerms, "], found ", n));
  WeightedTerms terms{};
  for (int64_t i = 0; i < n; ++i) {
    terms.values[i] = values[i];
    terms.coefficients[i] = coefficients[i];
  }
  terms.n = n;
  return launch("weightedSum", weightedSumKernel, 1, 1, 0, stream, terms, sum);
}

absl::Status recordBadId(const int64_t *firstBad, const int32_t *ids,
                         StepCheck::Kind kind, uint32_t instruction,
                         uint32_t idsBuffer, int64_t limit, StepCheck *check,
                         cudaStream_t stream) {
  return launch("recordBadId", recordBadIdKernel, 1, 1, 0, stream, firstBad,
                ids, kind, instruction, idsBuffer, limit, check);
}

absl::Status recordIfNotFinite(const float *value, StepCheck::Kind kind,
                               uint32_t instruction, StepCheck *check,
                               cudaStream_t stream) {
  return launch("recordIfNotFinite", recordIfNotFiniteKernel, 1, 1, 0, stream,
                value, kind, instruction, check);
}

} // namespace moe::rt::cuda
