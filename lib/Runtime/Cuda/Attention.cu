//===- Attention.cu - Causal grouped-query attention ----------------------===//
//
// Exact softmax attention without an S x S matrix, one warp per output row.
// A head row of headDim <= 256 floats is split over the warp's lanes (lane l
// holds elements l, l + 32, ...: consecutive lanes read consecutive floats),
// so each row the warp works with lives in registers and each dot product
// is a per-lane partial sum followed by a butterfly of warp shuffles. The
// butterfly leaves every lane with the bitwise-same sum, so every lane takes
// the same softmax decisions and the shuffles never diverge.
//
// The forward runs an online softmax over keys 0..i of query row i (running
// maximum, sum of exponentials rescaled when the maximum grows) and keeps
// only lse = max + log(sum) per row, as cpu::attentionForward does. The
// backward recomputes p = exp(s - lse) twice instead of storing it: once by
// query row (dq) and once by key row (dk, dv), so that every gradient row is
// owned by one warp and written once, with no atomics, and the group's query
// heads add into dk and dv in head order. The only scratch is D = dout . out
// per query row.
//
// These kernels are meant to be obviously correct, not fast: keys are read
// from global memory (through the caches) rather than tiled in shared
// memory, and rows near the end of the sequence do more work than the rest.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "AttentionShape.h"
#include "Launch.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <type_traits>

namespace moe::rt::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int64_t kMaxHeadDim = 256;

/// The sum of v over the warp, in every lane. xor-butterflies add the same
/// two partial sums in every lane of a pair, so all lanes get the same bits.
__device__ float warpSum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

__device__ double warpSum(double v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

/// A lane's slice of a head row: element t is row[lane + 32 t], 0 past
/// headDim (so padding adds nothing to dot products and is never stored).
template <int Width> struct Slice {
  float x[Width];

  __device__ static Slice zero() {
    Slice s;
#pragma unroll
    for (int t = 0; t < Width; ++t)
      s.x[t] = 0.0f;
    return s;
  }

  __device__ static Slice load(const float *row, int64_t headDim, int lane) {
    Slice s;
#pragma unroll
    for (int t = 0; t < Width; ++t) {
      int64_t e = lane + int64_t(kWarpSize) * t;
      s.x[t] = e < headDim ? row[e] : 0.0f;
    }
    return s;
  }

  /// row = factor * this.
  __device__ void store(float *row, int64_t headDim, int lane,
                        float factor) const {
#pragma unroll
    for (int t = 0; t < Width; ++t) {
      int64_t e = lane + int64_t(kWarpSize) * t;
      if (e < headDim)
        row[e] = factor * x[t];
    }
  }

  /// this = this * decay + weight * other.
  __device__ void scaleAdd(float decay, float weight, const Slice &other) {
#pragma unroll
    for (int t = 0; t < Width; ++t)
      x[t] = x[t] * decay + weight * other.x[t];
  }

  /// this += weight * other.
  __device__ void add(float weight, const Slice &other) {
#pragma unroll
    for (int t = 0; t < Width; ++t)
      x[t] += weight * other.x[t];
  }
};

/// The dot product of two head rows, in every lane of the warp.
template <int Width>
__device__ float dot(const Slice<Width> &a, const Slice<Width> &b) {
  float partial = 0.0f;
#pragma unroll
  for (int t = 0; t < Width; ++t)
    partial += a.x[t] * b.x[t];
  return warpSum(partial);
}

/// Where the tensors of one problem live: q, dq, out and dout rows are
/// [B, S, heads, headDim], k, v, dk and dv rows [B, S, kvHeads, headDim],
/// lse and D [B, heads, S].
struct Shape {
  int64_t B, S, heads, kvHeads, headDim;
  float scale;

  /// Query heads per kv head.
  __device__ int64_t group() const { return heads / kvHeads; }
  __device__ int64_t qOffset(int64_t b, int64_t i, int64_t h) const {
    return ((b * S + i) * heads + h) * headDim;
  }
  __device__ int64_t kvOffset(int64_t b, int64_t j, int64_t g) const {
    return ((b * S + j) * kvHeads + g) * headDim;
  }
  /// Index of (b, h, i) in lse and D.
  __device__ int64_t rowIndex(int64_t b, int64_t h, int64_t i) const {
    return (b * heads + h) * S + i;
  }
};

/// The (batch, query head, position) of a row of lse and D.
struct QueryRow {
  int64_t b, h, i;
  __device__ QueryRow(int64_t row, const Shape &shape)
      : b(row / shape.S / shape.heads), h(row / shape.S % shape.heads),
        i(row % shape.S) {}
};

/// The loop of a kernel with one warp per row of [count] rows: the warp's
/// first row and the stride to its next. Every lane of a warp sees the same
/// rows, so whole warps enter and leave the loop together.
struct WarpRows {
  int64_t first, stride;
  int lane;

  __device__ WarpRows() {
    int64_t thread = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    first = thread / kWarpSize;
    stride = int64_t(gridDim.x) * blockDim.x / kWarpSize;
    lane = threadIdx.x % kWarpSize;
  }
};

/// Query row i of (b, h), with row = (b * heads + h) * S + i (lse's index).
template <int Width>
__global__ void forwardKernel(const float *q, const float *k, const float *v,
                              float *out, float *lse, Shape shape) {
  WarpRows warp;
  int64_t rows = shape.B * shape.heads * shape.S;
  for (int64_t row = warp.first; row < rows; row += warp.stride) {
    auto [b, h, i] = QueryRow(row, shape);
    int64_t g = h / shape.group();
    auto qi = Slice<Width>::load(q + shape.qOffset(b, i, h), shape.headDim,
                                 warp.lane);
    auto acc = Slice<Width>::zero();
    // The online softmax: after key j, acc = sum over j' <= j of
    // exp(s_j' - m) v_j' and sum = sum of exp(s_j' - m), m the maximum so
    // far. The sum is double as cpu::attentionForward's.
    float m = -INFINITY;
    double sum = 0.0;
    for (int64_t j = 0; j <= i; ++j) {
      auto kj = Slice<Width>::load(k + shape.kvOffset(b, j, g), shape.headDim,
                                   warp.lane);
      auto vj = Slice<Width>::load(v + shape.kvOffset(b, j, g), shape.headDim,
                                   warp.lane);
      float s = shape.scale * dot(qi, kj);
      float mNext = fmaxf(m, s);
      // The first key has no state to decay (and m = -inf would make
      // m - mNext NaN for s = -inf); afterwards the decay is exactly 1
      // unless the maximum grew.
      float decay = j == 0 ? 0.0f : expf(m - mNext);
      float p = expf(s - mNext);
      sum = sum * decay + p;
      acc.scaleAdd(decay, p, vj);
      m = mNext;
    }
    acc.store(out + shape.qOffset(b, i, h), shape.headDim, warp.lane,
              static_cast<float>(1.0 / sum));
    if (warp.lane == 0)
      lse[row] = m + static_cast<float>(log(sum));
  }
}

/// delta[row] = dout_i . out_i (double, as the CPU), row as forwardKernel's.
__global__ void rowDotKernel(const float *dout, const float *out, float *delta,
                             Shape shape) {
  WarpRows warp;
  int64_t rows = shape.B * shape.heads * shape.S;
  for (int64_t row = warp.first; row < rows; row += warp.stride) {
    auto [b, h, i] = QueryRow(row, shape);
    const float *doRow = dout + shape.qOffset(b, i, h);
    const float *oRow = out + shape.qOffset(b, i, h);
    double partial = 0.0;
    for (int64_t e = warp.lane; e < shape.headDim; e += kWarpSize)
      partial += static_cast<double>(doRow[e]) * oRow[e];
    partial = warpSum(partial);
    if (warp.lane == 0)
      delta[row] = static_cast<float>(partial);
  }
}

/// dq_i = scale * sum over j <= i of ds_ij k_j, where p_ij = exp(s_ij -
/// lse_i), dp_ij = dout_i . v_j and ds_ij = p_ij (dp_ij - D_i). Row as
/// forwardKernel's.
template <int Width>
__global__ void queryGradKernel(const float *dout, const float *q,
                                const float *k, const float *v,
                                const float *lse, const float *delta, float *dq,
                                Shape shape) {
  WarpRows warp;
  int64_t rows = shape.B * shape.heads * shape.S;
  for (int64_t row = warp.first; row < rows; row += warp.stride) {
    auto [b, h, i] = QueryRow(row, shape);
    int64_t g = h / shape.group();
    auto qi = Slice<Width>::load(q + shape.qOffset(b, i, h), shape.headDim,
                                 warp.lane);
    auto doi = Slice<Width>::load(dout + shape.qOffset(b, i, h), shape.headDim,
                                  warp.lane);
    float lseI = lse[row], deltaI = delta[row];
    auto acc = Slice<Width>::zero();
    for (int64_t j = 0; j <= i; ++j) {
      auto kj = Slice<Width>::load(k + shape.kvOffset(b, j, g), shape.headDim,
                                   warp.lane);
      auto vj = Slice<Width>::load(v + shape.kvOffset(b, j, g), shape.headDim,
                                   warp.lane);
      float p = expf(shape.scale * dot(qi, kj) - lseI);
      float ds = p * (dot(doi, vj) - deltaI);
      acc.add(ds, kj);
    }
    acc.store(dq + shape.qOffset(b, i, h), shape.headDim, warp.lane,
              shape.scale);
  }
}

/// Key row j of kv head g: dk_j = scale * sum of ds_ij q_i and dv_j = sum of
/// p_ij dout_i, over the group's query heads h in order and i >= j, with
/// row = (b * kvHeads + g) * S + j.
template <int Width>
__global__ void keyValueGradKernel(const float *dout, const float *q,
                                   const float *k, const float *v,
                                   const float *lse, const float *delta,
                                   float *dk, float *dv, Shape shape) {
  WarpRows warp;
  int64_t rows = shape.B * shape.kvHeads * shape.S;
  for (int64_t row = warp.first; row < rows; row += warp.stride) {
    int64_t j = row % shape.S;
    int64_t g = row / shape.S % shape.kvHeads;
    int64_t b = row / shape.S / shape.kvHeads;
    auto kj = Slice<Width>::load(k + shape.kvOffset(b, j, g), shape.headDim,
                                 warp.lane);
    auto vj = Slice<Width>::load(v + shape.kvOffset(b, j, g), shape.headDim,
                                 warp.lane);
    auto dkAcc = Slice<Width>::zero();
    auto dvAcc = Slice<Width>::zero();
    int64_t group = shape.group();
    for (int64_t h = g * group; h < (g + 1) * group; ++h)
      for (int64_t i = j; i < shape.S; ++i) {
        auto qi = Slice<Width>::load(q + shape.qOffset(b, i, h), shape.headDim,
                                     warp.lane);
        auto doi = Slice<Width>::load(dout + shape.qOffset(b, i, h),
                                      shape.headDim, warp.lane);
        int64_t rowI = shape.rowIndex(b, h, i);
        float p = expf(shape.scale * dot(qi, kj) - lse[rowI]);
        float ds = p * (dot(doi, vj) - delta[rowI]);
        dvAcc.add(p, doi);
        dkAcc.add(ds, qi);
      }
    dkAcc.store(dk + shape.kvOffset(b, j, g), shape.headDim, warp.lane,
                shape.scale);
    dvAcc.store(dv + shape.kvOffset(b, j, g), shape.headDim, warp.lane, 1.0f);
  }
}

/// Returns run(std::integral_constant<int, Width>()) with the narrowest
/// slice (floats per lane) that holds a head row: registers are sized at
/// compile time, and a small head should not carry 256 floats' worth.
template <typename RunFn>
absl::Status withSliceWidth(int64_t headDim, RunFn &&run) {
  if (headDim <= 1 * kWarpSize)
    return run(std::integral_constant<int, 1>());
  if (headDim <= 2 * kWarpSize)
    return run(std::integral_constant<int, 2>());
  if (headDim <= 4 * kWarpSize)
    return run(std::integral_constant<int, 4>());
  return run(std::integral_constant<int, 8>());
}

Shape makeShape(int64_t B, int64_t S, int64_t heads, int64_t kvHeads,
                int64_t headDim) {
  float scale = 1.0f / std::sqrt(static_cast<float>(headDim));
  return {B, S, heads, kvHeads, headDim, scale};
}

/// Blocks for one warp per row over `rows` rows (the kernels loop when the
/// grid is clamped).
unsigned gridForRows(int64_t rows) { return gridFor(rows * kWarpSize); }

} // namespace

absl::Status attentionForward(const float *q, const float *k, const float *v,
                              float *out, float *lse, int64_t B, int64_t S,
                              int64_t heads, int64_t kvHeads, int64_t headDim,
                              cudaStream_t stream) {
  if (absl::Status status = checkAttentionShape("attentionForward", B, S, heads,
                                                kvHeads, headDim, kMaxHeadDim);
      !status.ok())
    return status;
  // As the CPU: nothing to compute, nothing written (lse included).
  if (B == 0 || S == 0 || heads == 0 || headDim == 0)
    return absl::OkStatus();
  Shape shape = makeShape(B, S, heads, kvHeads, headDim);
  unsigned blocks = gridForRows(B * heads * S);
  return withSliceWidth(headDim, [&](auto width) {
    return launch("attentionForward", forwardKernel<decltype(width)::value>,
                  blocks, kThreads, 0, stream, q, k, v, out, lse, shape);
  });
}

uint64_t attentionBackwardWorkspaceBytes(int64_t B, int64_t S, int64_t heads) {
  if (B <= 0 || S <= 0 || heads <= 0)
    return 0;
  return static_cast<uint64_t>(B * heads * S) * sizeof(float);
}

absl::Status attentionBackward(const float *dout, const float *q,
                               const float *k, const float *v, const float *out,
                               const float *lse, float *dq, float *dk,
                               float *dv, int64_t B, int64_t S, int64_t heads,
                               int64_t kvHeads, int64_t headDim,
                               float *workspace, cudaStream_t stream) {
  if (absl::Status status = checkAttentionShape(
          "attentionBackward", B, S, heads, kvHeads, headDim, kMaxHeadDim);
      !status.ok())
    return status;
  // dk and dv are empty: nothing to write. (With heads == 0 and kv heads
  // left, the key kernel runs over empty groups and zeroes dk, dv, as the
  // CPU does.)
  if (B == 0 || S == 0 || kvHeads == 0 || headDim == 0)
    return absl::OkStatus();
  if (workspace == nullptr && attentionBackwardWorkspaceBytes(B, S, heads) > 0)
    return absl::InvalidArgumentError(
        "attentionBackward: workspace is null (needs "
        "attentionBackwardWorkspaceBytes)");
  Shape shape = makeShape(B, S, heads, kvHeads, headDim);
  float *delta = workspace;
  int64_t queryRows = B * heads * S;
  if (queryRows > 0) {
    MOE_CUDA_TRY(launch("attentionBackward (dout . out)", rowDotKernel,
                        gridForRows(queryRows), kThreads, 0, stream, dout, out,
                        delta, shape));
    MOE_CUDA_TRY(withSliceWidth(headDim, [&](auto width) {
      return launch("attentionBackward (dq)",
                    queryGradKernel<decltype(width)::value>,
                    gridForRows(queryRows), kThreads, 0, stream, dout, q, k, v,
                    lse, delta, dq, shape);
    }));
  }
  return withSliceWidth(headDim, [&](auto width) {
    return launch("attentionBackward (dk, dv)",
                  keyValueGradKernel<decltype(width)::value>,
                  gridForRows(B * kvHeads * S), kThreads, 0, stream, dout, q, k,
                  v, lse, delta, dk, dv, shape);
  });
}

} // namespace moe::rt::cuda
