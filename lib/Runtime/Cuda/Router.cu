//===- Router.cu - softmax top-k router and its backward ------------------===//
//
// One warp per token (cpu::routerForward's row loop). Lane l owns the
// experts l, l + 32, ... (E <= 1024, so at most 32 each) and is the only
// thread that reads or writes their entries of a probs/dlogits row, so a
// token needs no memory ordering between lanes: everything crosses lanes
// through shuffles. The softmax's maximum and double sum are warp
// reductions (the sum's order differs from the CPU's, within rounding).
//
// The top-k is cpu::detail::selectTopK's rule evaluated in parallel: round
// j picks, among the experts not yet taken, what the CPU's sequential scan
// would. That scan keeps its first candidate when its probability is NaN
// (nothing compares greater) and otherwise ends at the largest non-NaN
// probability, ties to the lowest id; each lane finds both for its own
// experts, and the warp reduces them by id and by (probability, id), which
// are total orders, so every lane agrees on the winner. Given the same
// probabilities, GPU and CPU select the same ids.
//
// Capacity dropping admits the first C slots of each expert in slot-major
// order (all first choices in token order, then all second choices, ...).
// Whether a slot is admitted depends only on the slots routed to the same
// expert before it, so one block per expert walks the slot-major sequence
// in chunks, ranks its expert's slots with a block-wide count, and sets
// those ranked C or later to -1. A block only ever rewrites its own
// expert's id, to -1, which no other block is looking for, so the blocks
// need not coordinate.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "BlockCount.cuh"
#include "Launch.h"
#include "SharedMemory.cuh"

#include "absl/strings/str_cat.h"

#include <climits>
#include <cmath>

namespace moe::rt::cuda {
namespace {

/// The most experts a warp's lanes cover with one 32-bit mask each.
constexpr int64_t kMaxExperts = kWarpSize * 32;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;
/// The id of "no candidate": above every expert id.
constexpr int32_t kNoExpert = INT32_MAX;

/// One warp per token: the grid-stride loop over tokens, uniform across the
/// warp so its shuffles see every lane.
#define TOKEN_PER_WARP(t, T)                                                   \
  for (int64_t t =                                                             \
           (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarpSize;       \
       t < (T); t += int64_t(gridDim.x) * blockDim.x / kWarpSize)

__device__ float warpMax(float value) {
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2)
    value = fmaxf(value, __shfl_xor_sync(kFullWarp, value, mask));
  return value;
}

/// The warp's sum; broadcast from lane 0 so that every lane holds the very
/// same bits whatever the butterfly's rounding.
__device__ double warpSum(double value) {
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2)
    value += __shfl_xor_sync(kFullWarp, value, mask);
  return __shfl_sync(kFullWarp, value, 0);
}

/// An expert and its probability.
struct Candidate {
  int32_t id;
  float value;
};

__device__ Candidate shuffleXor(Candidate c, int mask) {
  return {__shfl_xor_sync(kFullWarp, c.id, mask),
          __shfl_xor_sync(kFullWarp, c.value, mask)};
}

/// Whether `a` ranks before `b` in the top-k order: a larger probability,
/// or an equal one and a lower id (the CPU's strict > while scanning ids
/// upwards). Only non-NaN candidates are compared.
__device__ bool ranksBefore(Candidate a, Candidate b) {
  if (a.id == kNoExpert)
    return false;
  if (b.id == kNoExpert)
    return true;
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

/// Calls visit(j, id, p[id]) in every lane for j = 0 .. topK - 1, with the
/// ids cpu::detail::selectTopK(p, E, topK) returns, in its order. Each lane
/// reads only its own experts' p. Requires 1 <= topK <= E <= kMaxExperts.
template <typename Visit>
__device__ void forEachTopK(const float *p, int32_t E, int32_t topK,
                            Visit visit) {
  int32_t lane = threadIdx.x % kWarpSize;
  uint32_t taken = 0; // bit i: expert lane + 32 i is already selected
  for (int32_t j = 0; j < topK; ++j) {
    // Among this lane's experts not yet taken: the lowest id, and the
    // largest non-NaN probability (ids ascend, so strict > keeps the lower).
    Candidate first{kNoExpert, 0.0f}, best{kNoExpert, 0.0f};
    for (int32_t i = 0, e = lane; e < E; ++i, e += kWarpSize) {
      if (taken >> i & 1u)
        continue;
      Candidate c{e, p[e]};
      if (first.id == kNoExpert)
        first = c;
      if (!isnan(c.value) && ranksBefore(c, best))
        best = c;
    }
    for (int mask = kWarpSize / 2; mask > 0; mask /= 2) {
      Candidate otherFirst = shuffleXor(first, mask);
      if (otherFirst.id < first.id)
        first = otherFirst;
      Candidate otherBest = shuffleXor(best, mask);
      if (ranksBefore(otherBest, best))
        best = otherBest;
    }
    // j < topK <= E leaves an expert untaken, so `first` is one. The CPU's
    // scan starts from it and, unless it is NaN, ends at `best` (which then
    // exists: `first` itself qualifies).
    Candidate chosen = isnan(first.value) ? first : best;
    if (chosen.id % kWarpSize == lane)
      taken |= 1u << (chosen.id / kWarpSize);
    visit(j, chosen.id, chosen.value);
  }
}

__global__ void softmaxTopKKernel(const float *logits, float *probs,
                                  float *weights, int32_t *indices, int64_t T,
                                  int32_t E, int32_t topK) {
  int32_t lane = threadIdx.x % kWarpSize;
  TOKEN_PER_WARP(t, T) {
    const float *x = logits + t * E;
    float *p = probs + t * E;
    float m = -INFINITY;
    for (int32_t e = lane; e < E; e += kWarpSize)
      m = fmaxf(m, x[e]);
    m = warpMax(m);
    double sum = 0.0;
    for (int32_t e = lane; e < E; e += kWarpSize) {
      p[e] = expf(x[e] - m);
      sum += p[e];
    }
    float denom = static_cast<float>(warpSum(sum));
    for (int32_t e = lane; e < E; e += kWarpSize)
      p[e] /= denom;

    // Lane 0 writes the token's indices and, for now, the selected
    // probabilities; the renormalisation needs their sum, in selection
    // order as the CPU adds them.
    int32_t *idx = indices + t * topK;
    float *w = weights + t * topK;
    float selected = 0.0f;
    forEachTopK(p, E, topK, [&](int32_t j, int32_t id, float value) {
      selected += value;
      if (lane == 0) {
        idx[j] = id;
        w[j] = value;
      }
    });
    if (lane == 0)
      for (int32_t j = 0; j < topK; ++j)
        w[j] /= selected;
  }
}

/// One block per expert (blockIdx.x): drops the expert's slots that come
/// `capacity` or later among them in slot-major order.
__global__ void dropOverCapacityKernel(int32_t *indices, int64_t T,
                                       int64_t topK, int64_t capacity) {
  MOE_BLOCK_SHARED(int, warpCounts, kWarpsPerBlock);
  int32_t expert = blockIdx.x;
  int64_t numSlots = T * topK;
  int64_t routedBefore = 0; // the expert's slots in earlier chunks
  for (int64_t chunk = 0; chunk < numSlots; chunk += blockDim.x) {
    // Position q of the slot-major order is choice j = q / T of token
    // t = q % T, stored at t * topK + j.
    int64_t q = chunk + threadIdx.x;
    int64_t slot = 0;
    bool routedHere = false;
    if (q < numSlots) {
      slot = (q % T) * topK + q / T;
      routedHere = indices[slot] == expert;
    }
    int chunkCount;
    int64_t rank =
        routedBefore + blockExclusiveCount(routedHere, warpCounts, &chunkCount);
    if (routedHere && rank >= capacity)
      indices[slot] = -1;
    routedBefore += chunkCount;
  }
}

__global__ void routerBackwardKernel(const float *dweights, const float *dprobs,
                                     const float *probs, float *dlogits,
                                     int64_t T, int32_t E, int32_t topK) {
  int32_t lane = threadIdx.x % kWarpSize;
  TOKEN_PER_WARP(t, T) {
    const float *p = probs + t * E;
    const float *dw = dweights + t * topK;
    // dlogits' row holds dp until the last loop; each lane reads dprobs[e]
    // before writing dp[e], so dlogits may alias dprobs.
    float *dp = dlogits + t * E;
    for (int32_t e = lane; e < E; e += kWarpSize)
      dp[e] = dprobs ? dprobs[t * E + e] : 0.0f;

    // Through the renormalisation w_j = p[idx_j] / s:
    // dp[idx_j] += (dw_j - sum_l dw_l w_l) / s. Each sum needs the one
    // before it complete, and the selection is cheap next to storing it
    // (up to E ids a token), so it is recomputed for each.
    float selected = 0.0f;
    forEachTopK(p, E, topK,
                [&](int32_t, int32_t, float value) { selected += value; });
    float dot = 0.0f;
    forEachTopK(p, E, topK, [&](int32_t j, int32_t, float value) {
      dot += dw[j] * (value / selected);
    });
    forEachTopK(p, E, topK, [&](int32_t j, int32_t id, float) {
      if (id % kWarpSize == lane)
        dp[id] += (dw[j] - dot) / selected;
    });

    // Through the softmax: dlogits = p (dp - sum_e p dp).
    double pdp = 0.0;
    for (int32_t e = lane; e < E; e += kWarpSize)
      pdp += static_cast<double>(p[e]) * dp[e];
    float mean = static_cast<float>(warpSum(pdp));
    for (int32_t e = lane; e < E; e += kWarpSize)
      dp[e] = p[e] * (dp[e] - mean);
  }
}

/// The arguments the kernels cannot take, as cpu::routerForward requires
/// them and the warp's expert masks limit them.
absl::Status checkRouterShape(const char *kernel, int64_t T, int64_t E,
                              int64_t topK) {
  if (T < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(kernel, ": negative token count ", T));
  if (E < 1 || E > kMaxExperts)
    return absl::InvalidArgumentError(absl::StrCat(
        kernel, ": expert count ", E, " is outside [1, ", kMaxExperts, "]"));
  if (topK < 1 || topK > E)
    return absl::InvalidArgumentError(
        absl::StrCat(kernel, ": topK ", topK, " is outside [1, E = ", E, "]"));
  return absl::OkStatus();
}

/// cpu::detail::expertCapacity: ceil(cf * T * topK / E) in double, in the
/// same order; -1 (unbounded) when cf <= 0.
int64_t expertCapacity(float capacityFactor, int64_t T, int64_t E,
                       int64_t topK) {
  if (capacityFactor <= 0.0f)
    return -1;
  double c = static_cast<double>(capacityFactor) * static_cast<double>(T) *
             static_cast<double>(topK) / static_cast<double>(E);
  return static_cast<int64_t>(std::ceil(c));
}

} // namespace

absl::Status routerForward(const float *logits, float *probs, float *weights,
                           int32_t *indices, int64_t T, int64_t E, int64_t topK,
                           float capacityFactor, cudaStream_t stream) {
  if (absl::Status status = checkRouterShape("routerForward", T, E, topK);
      !status.ok())
    return status;
  if (T == 0)
    return absl::OkStatus();
  if (absl::Status status =
          launch("routerForward", softmaxTopKKernel, gridFor(T, kWarpsPerBlock),
                 kThreads, 0, stream, logits, probs, weights, indices, T,
                 static_cast<int32_t>(E), static_cast<int32_t>(topK));
      !status.ok())
    return status;

  // A token routes at most one slot to an expert (its top-k ids are
  // distinct), so a capacity of T or more drops nothing.
  int64_t capacity = expertCapacity(capacityFactor, T, E, topK);
  if (capacity < 0 || capacity >= T)
    return absl::OkStatus();
  return launch("routerForward (capacity)", dropOverCapacityKernel,
                static_cast<unsigned>(E), kThreads, 0, stream, indices, T, topK,
                capacity);
}

absl::Status routerBackward(const float *dweights, const float *dprobs,
                            const float *probs, float *dlogits, int64_t T,
                            int64_t E, int64_t topK, cudaStream_t stream) {
  if (absl::Status status = checkRouterShape("routerBackward", T, E, topK);
      !status.ok())
    return status;
  if (T == 0)
    return absl::OkStatus();
  return launch("routerBackward", routerBackwardKernel,
                gridFor(T, kWarpsPerBlock), kThreads, 0, stream, dweights,
                dprobs, probs, dlogits, T, static_cast<int32_t>(E),
                static_cast<int32_t>(topK));
}

} // namespace moe::rt::cuda
