//===- ExpertRouting.cu - tokens to experts and back ----------------------===//
//
// The permutation around the grouped expert GEMMs, as cpu's ExpertGroups
// and expertsForward's combine step build it.
//
// groupByExpert is a stable counting sort of the flat slots t * topK + j by
// expert id: per-expert counts (integer atomics, whose totals do not depend
// on their order), an exclusive scan of those E counts by one thread (E is
// small, and a serial loop has no order to get wrong), then one block per
// expert that walks all slots in order, chunk by chunk, and places its
// expert's slots at offsets[e] + their rank from a block-wide count. The
// placement reads every slot once per expert, which is cheap for the expert
// counts of a MoE layer and keeps each slot's position a function of the
// slots before it alone.
//
// combineRows runs one block per token. The CPU adds a token's expert
// outputs expert by expert (index_add_ order), so the block first orders
// the token's topK slots by (expert id, j), dropped ones last, then each
// thread sums its columns in that order, with the products and sums
// rounded separately (no FMA contraction) as the CPU's loop does them: on
// the same rows the result is the CPU's bit for bit.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "BlockCount.cuh"
#include "Launch.h"
#include "SharedMemory.cuh"
#include "Storage.cuh"

#include "absl/strings/str_cat.h"

#include <climits>
#include <type_traits>

namespace moe::rt::cuda {
namespace {

/// The most slots a token may have in combineRows: its ordered slots live
/// in shared memory, 16 bytes each. The router allows no more (topK <= E <=
/// 1024).
constexpr int64_t kMaxCombineTopK = 1024;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

#define GRID_STRIDE(i, n)                                                      \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(blockDim.x) * gridDim.x)

static_assert(sizeof(int64_t) == sizeof(unsigned long long),
              "offsets are counted with 64-bit atomics");

/// offsets[e + 1] += the slots routed to e (offsets zeroed before).
__global__ void countSlotsKernel(const int32_t *indices, int64_t numSlots,
                                 int64_t E, int64_t *offsets) {
  GRID_STRIDE(s, numSlots) {
    int32_t e = indices[s];
    if (e >= 0 && e < E)
      atomicAdd(reinterpret_cast<unsigned long long *>(offsets + e + 1), 1ull);
  }
}

/// offsets[e + 1] += offsets[e] in order: the counts become the groups'
/// bounds. One thread.
__global__ void scanOffsetsKernel(int64_t *offsets, int64_t E) {
  for (int64_t e = 0; e < E; ++e)
    offsets[e + 1] += offsets[e];
}

/// One block per expert (blockIdx.x): slots[offsets[e] + r] = the r-th slot
/// routed to e, in ascending slot order.
__global__ void placeSlotsKernel(const int32_t *indices, int64_t numSlots,
                                 const int64_t *offsets, int64_t *slots) {
  MOE_BLOCK_SHARED(int, warpCounts, kWarpsPerBlock);
  int32_t expert = blockIdx.x;
  int64_t next = offsets[expert]; // where the chunk's first slot goes
  for (int64_t chunk = 0; chunk < numSlots; chunk += blockDim.x) {
    int64_t s = chunk + threadIdx.x;
    bool routedHere = s < numSlots && indices[s] == expert;
    int chunkCount;
    int rank = blockExclusiveCount(routedHere, warpCounts, &chunkCount);
    if (routedHere)
      slots[next + rank] = s;
    next += chunkCount;
  }
}

/// positionOfSlot[slots[r]] = r for r < offsets[E] (the rest already -1).
__global__ void scatterPositionsKernel(const int64_t *slots,
                                       const int64_t *offsets, int64_t E,
                                       int64_t numSlots,
                                       int64_t *positionOfSlot) {
  int64_t count = min(offsets[E], numSlots);
  GRID_STRIDE(r, count) positionOfSlot[slots[r]] = r;
}

/// One slot's up projections into hidden [slots, 2, F]: (u, g) of its row,
/// or zeros for a dropped slot (position -1).
__global__ void saveHiddenKernel(const float *u, const float *g,
                                 const int64_t *positionOfSlot,
                                 int64_t numSlots, int64_t F, float *hidden) {
  GRID_STRIDE(i, numSlots * 2 * F) {
    int64_t s = i / (2 * F), c = i % (2 * F);
    int64_t row = positionOfSlot[s];
    const float *half = c < F ? u : g;
    hidden[i] = row < 0 ? 0.0f : half[row * F + c % F];
  }
}

/// Rows r < count of u and g from the hidden rows of their slots.
__global__ void loadHiddenKernel(const float *hidden, const int64_t *slots,
                                 int64_t count, int64_t F, float *u,
                                 float *g) {
  GRID_STRIDE(i, count * 2 * F) {
    int64_t r = i / (2 * F), c = i % (2 * F);
    float value = hidden[slots[r] * 2 * F + c];
    (c < F ? u : g)[r * F + c % F] = value;
  }
}

/// Rows of fp32 or BF16 storage into fp32 or BF16 rows: a copy, or an
/// exact widening (BF16 to fp32); fp32 to BF16 is not instantiated.
template <typename In, typename Out>
__global__ void gatherRowsKernel(const In *x, const int64_t *slots,
                                 int64_t count, int64_t topK, int64_t width,
                                 Out *rows) {
  GRID_STRIDE(i, count * width) {
    int64_t r = i / width, c = i % width;
    const In *from = x + (slots[r] / topK) * width + c;
    if constexpr (std::is_same_v<In, Out>)
      rows[i] = *from;
    else
      storeValue(rows + i, loadValue(from));
  }
}

/// One slot's term of a token's combination: weight * rows[row, :], or
/// nothing when row < 0 (dropped).
struct Contribution {
  int64_t row;
  float weight;
};

/// Whether the CPU adds slot a of a token before slot b: kept slots first,
/// by expert id, then by j (a token's slots of one expert are grouped in
/// ascending slot order). A total order on the token's slots.
__device__ bool addedBefore(int64_t a, int64_t b, const int64_t *position,
                            const int32_t *idx) {
  bool droppedA = position[a] < 0, droppedB = position[b] < 0;
  if (droppedA != droppedB)
    return droppedB;
  if (!droppedA && idx[a] != idx[b])
    return idx[a] < idx[b];
  return a < b;
}

/// One block per token (grid-stride): dynamic shared memory holds the
/// token's topK contributions in the order they are added.
template <typename Out>
__global__ void combineRowsKernel(const float *rows,
                                  const int64_t *positionOfSlot,
                                  const int32_t *indices, const float *weights,
                                  int64_t T, int64_t topK, int64_t width,
                                  Out *y) {
  MOE_DYNAMIC_SHARED(Contribution, ordered, alignof(Contribution));
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const int64_t *position = positionOfSlot + t * topK;
    const int32_t *idx = indices + t * topK;
    const float *w = weights + t * topK;
    // Slot j goes after the slots added before it: a rank sort, O(topK^2)
    // for a topK of a few.
    for (int64_t j = threadIdx.x; j < topK; j += blockDim.x) {
      int64_t rank = 0;
      for (int64_t k = 0; k < topK; ++k)
        rank += addedBefore(k, j, position, idx);
      ordered[rank] = {position[j], w[j]};
    }
    __syncthreads();

    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      float sum = 0.0f;
      for (int64_t k = 0; k < topK; ++k) {
        Contribution term = ordered[k];
        if (term.row < 0)
          break; // dropped slots come last
        sum =
            __fadd_rn(sum, __fmul_rn(term.weight, rows[term.row * width + c]));
      }
      // A BF16 y takes the fp32 sum rounded once (as the widened y's cast).
      storeValue(y + t * width + c, sum);
    }
    // The next token rewrites `ordered`.
    __syncthreads();
  }
}

absl::Status checkNonNegative(const char *kernel, const char *what,
                              int64_t value) {
  if (value < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(kernel, ": negative ", what, " ", value));
  return absl::OkStatus();
}

absl::Status checkTopK(const char *kernel, int64_t topK, int64_t most) {
  if (topK < 1 || topK > most)
    return absl::InvalidArgumentError(
        absl::StrCat(kernel, ": topK ", topK, " is outside [1, ", most, "]"));
  return absl::OkStatus();
}

} // namespace

absl::Status groupByExpert(const int32_t *indices, int64_t T, int64_t E,
                           int64_t topK, int64_t *offsets, int64_t *slots,
                           cudaStream_t stream) {
  MOE_CUDA_TRY(checkNonNegative("groupByExpert", "token count", T));
  MOE_CUDA_TRY(checkTopK("groupByExpert", topK, INT32_MAX));
  // One block per expert.
  if (E < 0 || E > INT32_MAX)
    return absl::InvalidArgumentError(absl::StrCat(
        "groupByExpert: expert count ", E, " is outside [0, ", INT32_MAX, "]"));
  MOE_CUDA_OK(cudaMemsetAsync(offsets, 0, (E + 1) * sizeof(int64_t), stream));
  int64_t numSlots = T * topK;
  if (numSlots == 0 || E == 0)
    return absl::OkStatus();
  MOE_CUDA_TRY(launch("groupByExpert (count)", countSlotsKernel,
                      gridFor(numSlots), kThreads, 0, stream, indices, numSlots,
                      E, offsets));
  MOE_CUDA_TRY(launch("groupByExpert (scan)", scanOffsetsKernel, 1, 1, 0,
                      stream, offsets, E));
  return launch("groupByExpert (place)", placeSlotsKernel,
                static_cast<unsigned>(E), kThreads, 0, stream, indices,
                numSlots, offsets, slots);
}

template <typename In, typename Out>
absl::Status gatherRowsOf(const In *x, const int64_t *slots, int64_t count,
                          int64_t topK, int64_t width, Out *rows,
                          cudaStream_t stream) {
  MOE_CUDA_TRY(checkNonNegative("gatherRows", "row count", count));
  MOE_CUDA_TRY(checkNonNegative("gatherRows", "width", width));
  MOE_CUDA_TRY(checkTopK("gatherRows", topK, INT64_MAX));
  if (count == 0 || width == 0)
    return absl::OkStatus();
  return launch("gatherRows", gatherRowsKernel<In, Out>, gridFor(count * width),
                kThreads, 0, stream, x, slots, count, topK, width, rows);
}

absl::Status gatherRows(const float *x, const int64_t *slots, int64_t count,
                        int64_t topK, int64_t width, float *rows,
                        cudaStream_t stream) {
  return gatherRowsOf(x, slots, count, topK, width, rows, stream);
}

absl::Status gatherRows(const uint16_t *x, const int64_t *slots,
                        int64_t count, int64_t topK, int64_t width,
                        uint16_t *rows, cudaStream_t stream) {
  return gatherRowsOf(x, slots, count, topK, width, rows, stream);
}

absl::Status gatherRows(const uint16_t *x, const int64_t *slots,
                        int64_t count, int64_t topK, int64_t width, float *rows,
                        cudaStream_t stream) {
  return gatherRowsOf(x, slots, count, topK, width, rows, stream);
}

template <typename Out>
absl::Status combineRowsOf(const float *rows, const int64_t *positionOfSlot,
                           const int32_t *indices, const float *weights,
                           int64_t T, int64_t topK, int64_t width, Out *y,
                           cudaStream_t stream) {
  MOE_CUDA_TRY(checkNonNegative("combineRows", "token count", T));
  MOE_CUDA_TRY(checkNonNegative("combineRows", "width", width));
  MOE_CUDA_TRY(checkTopK("combineRows", topK, kMaxCombineTopK));
  if (T == 0 || width == 0)
    return absl::OkStatus();
  return launch("combineRows", combineRowsKernel<Out>, gridFor(T, 1), kThreads,
                topK * sizeof(Contribution), stream, rows, positionOfSlot,
                indices, weights, T, topK, width, y);
}

absl::Status combineRows(const float *rows, const int64_t *positionOfSlot,
                         const int32_t *indices, const float *weights,
                         int64_t T, int64_t topK, int64_t width, float *y,
                         cudaStream_t stream) {
  return combineRowsOf(rows, positionOfSlot, indices, weights, T, topK, width,
                       y, stream);
}

absl::Status combineRows(const float *rows, const int64_t *positionOfSlot,
                         const int32_t *indices, const float *weights,
                         int64_t T, int64_t topK, int64_t width, uint16_t *y,
                         cudaStream_t stream) {
  return combineRowsOf(rows, positionOfSlot, indices, weights, T, topK, width,
                       y, stream);
}

absl::Status invertSlots(const int64_t *slots, const int64_t *offsets,
                         int64_t E, int64_t numSlots, int64_t *positionOfSlot,
                         cudaStream_t stream) {
  MOE_CUDA_TRY(checkNonNegative("invertSlots", "expert count", E));
  MOE_CUDA_TRY(checkNonNegative("invertSlots", "slot count", numSlots));
  if (numSlots == 0)
    return absl::OkStatus();
  // All-ones bytes are the int64 -1 of an unused slot.
  MOE_CUDA_OK(cudaMemsetAsync(positionOfSlot, 0xff, numSlots * sizeof(int64_t),
                              stream));
  return launch("invertSlots", scatterPositionsKernel, gridFor(numSlots),
                kThreads, 0, stream, slots, offsets, E, numSlots,
                positionOfSlot);
}

absl::Status saveHidden(const float *u, const float *g,
                        const int64_t *positionOfSlot, int64_t numSlots,
                        int64_t F, float *hidden, cudaStream_t stream) {
  MOE_CUDA_TRY(checkNonNegative("saveHidden", "slot count", numSlots));
  MOE_CUDA_TRY(checkNonNegative("saveHidden", "width", F));
  if (numSlots == 0 || F == 0)
    return absl::OkStatus();
  return launch("saveHidden", saveHiddenKernel, gridFor(numSlots * 2 * F),
                kThreads, 0, stream, u, g, positionOfSlot, numSlots, F, hidden);
}

absl::Status loadHidden(const float *hidden, const int64_t *slots,
                        int64_t count, int64_t F, float *u, float *g,
                        cudaStream_t stream) {
  MOE_CUDA_TRY(checkNonNegative("loadHidden", "row count", count));
  MOE_CUDA_TRY(checkNonNegative("loadHidden", "width", F));
  if (count == 0 || F == 0)
    return absl::OkStatus();
  return launch("loadHidden", loadHiddenKernel, gridFor(count * 2 * F),
                kThreads, 0, stream, hidden, slots, count, F, u, g);
}

} // namespace moe::rt::cuda
