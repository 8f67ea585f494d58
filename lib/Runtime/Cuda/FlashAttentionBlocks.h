//===- FlashAttentionBlocks.h - tiled BF16 attention's blocks ---*- C++ -*-===//
//
// The bodies of the tensor-core attention kernels (FlashAttention-2's tiling:
// exact softmax by an online rescaling, scores never in global memory), one
// thread block's work each, written against a small SIMT interface `Simt`
// instead of CUDA's built-ins. FlashAttention.cu instantiates them with the
// device's (threadIdx, __syncthreads, WMMA fragments on the tensor cores);
// unittests/Cuda/FlashAttentionEmulationTest.cpp with a CPU emulation of a
// block (one host thread per CUDA thread, barriers, whole-tile fragments), so
// the tiling, masking and indexing are tested where no GPU is.
//
// What a Simt provides (all calls made by every thread of the block):
//   thread(), blockX/Y/Z(), gridX(): the CUDA indices;
//   shared(): the block's dynamic shared memory (128-byte aligned);
//   syncThreads(), syncWarp(); shflXor(v, mask), shfl(v, lane): a warp's;
//   FragA (16x16 BF16, row-major), FragBRow / FragBCol (16x16 BF16 B operand
//   read row- or column-major), FragC (16x16 fp32 accumulator): WMMA's
//   m16n16k16 shapes, with load(frag, bf16*, ld), loadAcc, storeAcc (warp-
//   collective: the warp must syncWarp before reading what storeAcc wrote),
//   zero, scale (every element, the only element-wise use: a fragment's
//   layout is the hardware's) and mma (c += a b);
//   toBf16(float) (nearest even), fromBf16(bits), value(p) (an element of
//   float or BF16 storage as fp32), encodeFp8(value, format) (nearest
//   even, saturating) and decodeFp8(code, format), copy16(dst, src) (16
//   bytes, both 16-byte aligned).
//
// Shapes and layouts are Attention's (docs/ops.md): q, out [B, S, heads*d],
// k, v [B, S, kvHeads*d], lse [B, heads, S] natural-log sums over the scaled
// scores; BF16 tensors as bits. Inside, scores are in base 2 (scaled by
// scale * log2 e) so each exponential is one exp2.
//
// Numerics (docs/precision.md, "Attention on the GPU"): products of BF16
// inputs accumulate in fp32 on the tensor cores; the probabilities P and
// dS = P (dP - D) are rounded to BF16 to enter their GEMMs, as in
// FlashAttention; row sums, maxima, lse and D are fp32. Every output is
// written once by one block, in a fixed order: no atomics, so two runs give
// the same bits. The backward is two kernels (dk and dv by key tile, dq by
// query tile) rather than FlashAttention-2's atomically added dq; the dq
// kernel recomputes the scores, 7 tile GEMMs instead of 5 for the
// determinism.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_FLASHATTENTIONBLOCKS_H
#define MOE_LIB_RUNTIME_CUDA_FLASHATTENTIONBLOCKS_H

#include <cmath>
#include <cstddef>
#include <cstdint>

// MOE_SIMT_FN: a body's function (device code, or host code under the
// emulation); MOE_SIMT_SHAPE_FN: a shape rule the launch reads too.
#if defined(__CUDACC__)
#define MOE_SIMT_FN __device__ __forceinline__
#define MOE_SIMT_SHAPE_FN __host__ __device__ inline
#else
#define MOE_SIMT_FN inline
#define MOE_SIMT_SHAPE_FN inline
#endif

namespace moe::rt::cuda::flash {

/// Threads of a block: four warps, each owning 16 rows of the block's tile.
inline constexpr int kWarps = 4;
inline constexpr int kBlockThreads = kWarps * 32;
/// Rows of a block's tile and of each tile it iterates over (queries or
/// keys). Both 64, so the causal diagonal falls on whole tiles.
inline constexpr int kTile = 64;
/// Rows a warp owns: one WMMA tile high.
inline constexpr int kWarpRows = 16;
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

/// The problem. Strides are in elements: a query (or output) row of head h
/// at position i of batch b starts at (b * S + i) * qStride + h * headDim.
struct Shape {
  int64_t B, S, heads, kvHeads, headDim;
  /// 1 / sqrt(headDim), and the same times log2 e (scores in base 2).
  float scale, scaleLog2;

  MOE_SIMT_FN int64_t group() const { return heads / kvHeads; }
  MOE_SIMT_FN int64_t qStride() const { return heads * headDim; }
  MOE_SIMT_FN int64_t kvStride() const { return kvHeads * headDim; }
  MOE_SIMT_FN int64_t qOffset(int64_t b, int64_t i, int64_t h) const {
    return (b * S + i) * qStride() + h * headDim;
  }
  MOE_SIMT_FN int64_t kvOffset(int64_t b, int64_t j, int64_t g) const {
    return (b * S + j) * kvStride() + g * headDim;
  }
  /// Index of row (b, h, i) in lse and D.
  MOE_SIMT_FN int64_t rowIndex(int64_t b, int64_t h, int64_t i) const {
    return (b * heads + h) * S + i;
  }
  MOE_SIMT_FN int64_t tiles() const { return (S + kTile - 1) / kTile; }
};

struct ForwardArgs {
  const uint16_t *q, *k, *v;
  uint16_t *out;
  float *lse;
  Shape shape;
};

struct BackwardArgs {
  const uint16_t *dout, *q, *k, *v, *out;
  const float *lse;
  /// D = rowsum(dout * out) per query row, [B, heads, S]: written by
  /// rowDotBlock, read by the gradient blocks.
  float *delta;
  uint16_t *dq, *dk, *dv;
  Shape shape;
};

/// Shared-memory strides, in elements, padded so that rows start in
/// different banks; each keeps WMMA's rules (a multiple of 8 BF16 or 4
/// floats, tile pointers 32-byte aligned at every 16th row and column).
template <int D> struct Strides {
  static constexpr int kRow = D + 8;       // a [64, D] BF16 tile
  static constexpr int kScore = kTile + 4; // a warp's [16, 64] fp32 scores
  static constexpr int kProb = kTile + 8;  // a warp's [16, 64] BF16 P or dS
  static constexpr int kAcc = D + 4;       // a warp's [16, D] fp32 rows
  static constexpr size_t kTileBytes = size_t(kTile) * kRow * 2;
  static constexpr size_t kScoreBytes = size_t(kWarps) * kWarpRows * kScore * 4;
  static constexpr size_t kProbBytes = size_t(kWarps) * kWarpRows * kProb * 2;
  static constexpr size_t kAccBytes = size_t(kWarps) * kWarpRows * kAcc * 4;
  static_assert(D % 16 == 0, "head dims are padded to whole WMMA tiles");
  static_assert(kTileBytes % 128 == 0 && kScoreBytes % 128 == 0 &&
                    kProbBytes % 128 == 0 && kAccBytes % 128 == 0,
                "regions keep 128-byte alignment");
  // Epilogues stage a warp's fp32 rows in two adjacent BF16 tiles.
  static_assert(kAccBytes <= 2 * kTileBytes, "staging fits two tiles");
};

/// Shared memory of forwardBlock: Q, K, V tiles, per-warp scores,
/// probabilities and output accumulators.
template <int D> struct ForwardLayout {
  using St = Strides<D>;
  static constexpr size_t kQ = 0, kK = kQ + St::kTileBytes,
                          kV = kK + St::kTileBytes, kS = kV + St::kTileBytes,
                          kP = kS + St::kScoreBytes, kO = kP + St::kProbBytes,
                          kBytes = kO + St::kAccBytes;
};

/// Shared memory of keyValueGradBlock: K, V (the block's keys), Q, dO (the
/// query tile), per-warp S^T, dP^T, P^T, dS^T, and the tile's lse and D.
template <int D> struct KeyValueGradLayout {
  using St = Strides<D>;
  static constexpr size_t kK = 0, kV = kK + St::kTileBytes,
                          kQ = kV + St::kTileBytes, kDo = kQ + St::kTileBytes,
                          kS = kDo + St::kTileBytes, kDp = kS + St::kScoreBytes,
                          kP = kDp + St::kScoreBytes, kDs = kP + St::kProbBytes,
                          kLse = kDs + St::kProbBytes,
                          kDelta = kLse + kTile * 4,
                          kBytes = kDelta + kTile * 4;
};

/// Shared memory of queryGradBlock: Q, dO (the block's queries), K, V (the
/// key tile), per-warp S, dP and dS.
template <int D> struct QueryGradLayout {
  using St = Strides<D>;
  static constexpr size_t kQ = 0, kDo = kQ + St::kTileBytes,
                          kK = kDo + St::kTileBytes, kV = kK + St::kTileBytes,
                          kS = kV + St::kTileBytes, kDp = kS + St::kScoreBytes,
                          kDs = kDp + St::kScoreBytes,
                          kBytes = kDs + St::kProbBytes;
};

template <typename T> MOE_SIMT_FN T *at(unsigned char *base, size_t offset) {
  return reinterpret_cast<T *>(base + offset);
}

/// tile[r, c] = src[r * stride + c] for r < rows and c < headDim, 0 for
/// the rest of [64, D]: padding rows and columns are zero so they add
/// nothing to any product (and V's padding cannot bring NaN into P V).
template <int D, typename Simt>
MOE_SIMT_FN void loadTile(const Simt &simt, uint16_t *tile, const uint16_t *src,
                          int64_t stride, int64_t rows, int64_t headDim) {
  constexpr int kRow = Strides<D>::kRow;
  bool vector = headDim % 8 == 0 && stride % 8 == 0 &&
                reinterpret_cast<uintptr_t>(src) % 16 == 0;
  if (vector) {
    constexpr int kChunks = D / 8;
    for (int chunk = simt.thread(); chunk < kTile * kChunks;
         chunk += kBlockThreads) {
      int r = chunk / kChunks, c = chunk % kChunks * 8;
      uint16_t *to = tile + r * kRow + c;
      if (r < rows && c < headDim) {
        simt.copy16(to, src + r * stride + c);
      } else {
        for (int e = 0; e < 8; ++e)
          to[e] = 0;
      }
    }
    return;
  }
  for (int e = simt.thread(); e < kTile * D; e += kBlockThreads) {
    int r = e / D, c = e % D;
    tile[r * kRow + c] = r < rows && c < headDim ? src[r * stride + c] : 0;
  }
}

/// Loads the key and value tiles of keys k0 .. k0 + 63 of kv head g.
template <int D, typename Simt, typename Args>
MOE_SIMT_FN void loadKeyValueTiles(const Simt &simt, const Args &args,
                                   uint16_t *ks, uint16_t *vs, int64_t b,
                                   int64_t k0, int64_t g) {
  const Shape &shape = args.shape;
  loadTile<D>(simt, ks, args.k + shape.kvOffset(b, k0, g), shape.kvStride(),
              shape.S - k0, shape.headDim);
  loadTile<D>(simt, vs, args.v + shape.kvOffset(b, k0, g), shape.kvStride(),
              shape.S - k0, shape.headDim);
}

/// scores[16, 16 kTiles] = a[16 rows] b[16 kTiles rows]^T over D, the
/// kTiles column tiles accumulating together.
template <int D, int kTiles, typename Simt>
MOE_SIMT_FN void rowsTimesTilesT(const Simt &simt, const uint16_t *aRows,
                                 const uint16_t *bTile, float *scores) {
  using St = Strides<D>;
  typename Simt::FragC acc[kTiles];
  for (int n = 0; n < kTiles; ++n)
    simt.zero(acc[n]);
  for (int kk = 0; kk < D / 16; ++kk) {
    typename Simt::FragA a;
    simt.load(a, aRows + kk * 16, St::kRow);
    for (int n = 0; n < kTiles; ++n) {
      typename Simt::FragBCol b;
      simt.load(b, bTile + n * 16 * St::kRow + kk * 16, St::kRow);
      simt.mma(acc[n], a, b);
    }
  }
  for (int n = 0; n < kTiles; ++n)
    simt.storeAcc(scores + n * 16, acc[n], St::kScore);
}

/// scores[16, 64] (a warp's, stride kScore) = a[16 rows of A] b[64 rows
/// of B]^T over D: A's rows from `aRows` (stride kRow), B's from `bTile`.
/// `kTogether` column tiles accumulate at once, so each A fragment is read
/// from shared memory once per group of them: all four where registers
/// allow, one at a time in the dk/dv kernel, whose 2 D / 16 accumulators
/// already hold most of them.
template <int D, typename Simt, int kTogether = kTile / 16>
MOE_SIMT_FN void rowsTimesTileT(const Simt &simt, const uint16_t *aRows,
                                const uint16_t *bTile, float *scores) {
  static_assert((kTile / 16) % kTogether == 0, "whole groups of tiles");
  for (int first = 0; first < kTile / 16; first += kTogether)
    rowsTimesTilesT<D, kTogether>(simt, aRows,
                                  bTile + first * 16 * Strides<D>::kRow,
                                  scores + first * 16);
}

/// acc[n] += probs[16, 64] (a warp's BF16, stride kProb) tile[64, D], for
/// the D / 16 column tiles n.
template <int D, typename Simt, typename Acc>
MOE_SIMT_FN void probsTimesTile(const Simt &simt, const uint16_t *probs,
                                const uint16_t *tile, Acc *acc) {
  using St = Strides<D>;
  for (int kk = 0; kk < kTile / 16; ++kk) {
    typename Simt::FragA a;
    simt.load(a, probs + kk * 16, St::kProb);
    for (int n = 0; n < D / 16; ++n) {
      typename Simt::FragBRow b;
      simt.load(b, tile + kk * 16 * St::kRow + n * 16, St::kRow);
      simt.mma(acc[n], a, b);
    }
  }
}

/// Writes a warp's 16 rows of fp32 accumulators, scaled by rowScale(r),
/// as BF16 rows of `dst` (row r at dst + r * stride) for r < rows: each
/// row by the whole warp, consecutive lanes on consecutive elements.
template <int D, typename Simt, typename RowScale>
MOE_SIMT_FN void storeRows(const Simt &simt, const float *rowsIn, uint16_t *dst,
                           int64_t stride, int64_t rows, int64_t headDim,
                           RowScale rowScale) {
  int lane = simt.thread() % 32;
  for (int r = 0; r < kWarpRows; ++r) {
    float factor = rowScale(r);
    if (r >= rows)
      continue;
    for (int64_t c = lane; c < headDim; c += 32)
      dst[r * stride + c] =
          simt.toBf16(rowsIn[r * Strides<D>::kAcc + c] * factor);
  }
}

/// Stages the accumulators acc[D / 16] of a warp's 16 rows, times `scale`,
/// at `staging` (the warp's [16, kAcc] fp32 rows) and writes them as BF16.
template <int D, typename Simt>
MOE_SIMT_FN void storeAccumulators(const Simt &simt, typename Simt::FragC *acc,
                                   float scale, float *staging, uint16_t *dst,
                                   int64_t stride, int64_t rows,
                                   int64_t headDim) {
  for (int n = 0; n < D / 16; ++n) {
    simt.scale(acc[n], scale);
    simt.storeAcc(staging + n * 16, acc[n], Strides<D>::kAcc);
  }
  simt.syncWarp();
  storeRows<D>(simt, staging, dst, stride, rows, headDim,
               [](int) { return 1.0f; });
}

/// Where a block over one query tile of one head is: blockX() counts
/// query tiles from the last (the longest rows start first), blockY() is
/// the head, blockZ() the batch.
struct QueryTileBlock {
  int warp, lane;
  int64_t qTile, h, b, g, q0;

  template <typename Simt>
  static MOE_SIMT_FN QueryTileBlock of(const Simt &simt, const Shape &shape) {
    int64_t qTile = simt.gridX() - 1 - simt.blockX(), h = simt.blockY();
    return {simt.thread() / 32, simt.thread() % 32, qTile,        h,
            simt.blockZ(),      h / shape.group(),  qTile * kTile};
  }
};

/// Causal forward of one query tile of one head (a QueryTileBlock). Warp w
/// owns query rows q0 + 16 w ..; within a warp, lanes 2r and 2r + 1 own
/// row r's softmax state, each half of its keys.
template <int D, typename Simt>
MOE_SIMT_FN void forwardBlock(const Simt &simt, const ForwardArgs &args) {
  using St = Strides<D>;
  using L = ForwardLayout<D>;
  const Shape &shape = args.shape;
  unsigned char *smem = simt.shared();
  auto [warp, lane, qTile, h, b, g, q0] = QueryTileBlock::of(simt, shape);

  uint16_t *qs = at<uint16_t>(smem, L::kQ), *ks = at<uint16_t>(smem, L::kK),
           *vs = at<uint16_t>(smem, L::kV);
  float *scores = at<float>(smem, L::kS) + warp * kWarpRows * St::kScore;
  uint16_t *probs = at<uint16_t>(smem, L::kP) + warp * kWarpRows * St::kProb;
  float *outRows = at<float>(smem, L::kO) + warp * kWarpRows * St::kAcc;

  loadTile<D>(simt, qs, args.q + shape.qOffset(b, q0, h), shape.qStride(),
              shape.S - q0, shape.headDim);
  for (int e = lane; e < kWarpRows * St::kAcc; e += 32)
    outRows[e] = 0.0f;

  int r = lane / 2, half = lane % 2;
  int64_t query = q0 + warp * kWarpRows + r;
  // Row r's running maximum (base 2) and sum of the rounded probabilities.
  float rowMax = -INFINITY, rowSum = 0.0f;
  const uint16_t *warpQ = qs + warp * kWarpRows * St::kRow;

  // Keys up to q0 + 63: tiles 0 .. qTile (the diagonal one masked).
  for (int64_t kTileIndex = 0; kTileIndex <= qTile; ++kTileIndex) {
    int64_t k0 = kTileIndex * kTile;
    loadKeyValueTiles<D>(simt, args, ks, vs, b, k0, g);
    simt.syncThreads();

    rowsTimesTileT<D>(simt, warpQ, ks, scores);
    simt.syncWarp();

    float *scoreRow = scores + r * St::kScore + half * 32;
    float tileMax = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      int64_t key = k0 + half * 32 + c;
      float s = key <= query && key < shape.S ? scoreRow[c] * shape.scaleLog2
                                              : -INFINITY;
      scoreRow[c] = s;
      tileMax = fmaxf(tileMax, s);
    }
    tileMax = fmaxf(tileMax, simt.shflXor(tileMax, 1));
    float newMax = fmaxf(rowMax, tileMax);
    // A row with no key yet keeps -inf; exponents are taken from 0 then,
    // so exp2(-inf - 0) = 0 rather than NaN.
    float base = newMax == -INFINITY ? 0.0f : newMax;
    float decay = exp2f(rowMax - base);
    float tileSum = 0.0f;
    uint16_t *probRow = probs + r * St::kProb + half * 32;
    for (int c = 0; c < 32; ++c) {
      uint16_t p = simt.toBf16(exp2f(scoreRow[c] - base));
      probRow[c] = p;
      tileSum += simt.fromBf16(p);
    }
    tileSum += simt.shflXor(tileSum, 1);
    rowSum = rowSum * decay + tileSum;
    rowMax = newMax;
    float *outRow = outRows + r * St::kAcc + half * (D / 2);
    for (int c = 0; c < D / 2; ++c)
      outRow[c] *= decay;
    simt.syncWarp();

    typename Simt::FragC acc[D / 16];
    for (int n = 0; n < D / 16; ++n)
      simt.loadAcc(acc[n], outRows + n * 16, St::kAcc);
    probsTimesTile<D>(simt, probs, vs, acc);
    for (int n = 0; n < D / 16; ++n)
      simt.storeAcc(outRows + n * 16, acc[n], St::kAcc);
    // K and V are overwritten next; every warp must be done with them.
    simt.syncThreads();
  }

  int64_t rows = shape.S - (q0 + warp * kWarpRows);
  storeRows<D>(simt, outRows,
               args.out + shape.qOffset(b, q0 + warp * kWarpRows, h),
               shape.qStride(), rows, shape.headDim,
               [&](int row) { return 1.0f / simt.shfl(rowSum, 2 * row); });
  if (half == 0 && query < shape.S)
    args.lse[shape.rowIndex(b, h, query)] = (rowMax + log2f(rowSum)) * kLn2;
}

/// D[row] = dout_row . out_row for kWarps rows of the block: warp w takes
/// row blockX() * kWarps + w of [B, heads, S] (lse's order).
template <typename Simt>
MOE_SIMT_FN void rowDotBlock(const Simt &simt, const BackwardArgs &args) {
  const Shape &shape = args.shape;
  int warp = simt.thread() / 32, lane = simt.thread() % 32;
  int64_t row = int64_t(simt.blockX()) * kWarps + warp;
  int64_t rows = shape.B * shape.heads * shape.S;
  float partial = 0.0f;
  int64_t i = row % shape.S, h = row / shape.S % shape.heads,
          b = row / shape.S / shape.heads;
  if (row < rows) {
    int64_t offset = shape.qOffset(b, i, h);
    for (int64_t c = lane; c < shape.headDim; c += 32)
      partial += simt.fromBf16(args.dout[offset + c]) *
                 simt.fromBf16(args.out[offset + c]);
  }
  for (int mask = 16; mask > 0; mask /= 2)
    partial += simt.shflXor(partial, mask);
  if (row < rows && lane == 0)
    args.delta[row] = partial;
}

/// dk and dv of one key tile of one kv head: blockX() is the key tile,
/// blockY() the kv head, blockZ() the batch. The group's query heads, in
/// order, and every query tile at or after the key tile add into the
/// accumulators. Warp w owns keys k0 + 16 w ..; lanes 2r and 2r + 1 share
/// key row r's element-wise work.
template <int D, typename Simt>
MOE_SIMT_FN void keyValueGradBlock(const Simt &simt, const BackwardArgs &args) {
  using St = Strides<D>;
  using L = KeyValueGradLayout<D>;
  const Shape &shape = args.shape;
  unsigned char *smem = simt.shared();
  int warp = simt.thread() / 32, lane = simt.thread() % 32;
  int64_t kTileIndex = simt.blockX(), g = simt.blockY(), b = simt.blockZ();
  int64_t k0 = kTileIndex * kTile;

  uint16_t *ks = at<uint16_t>(smem, L::kK), *vs = at<uint16_t>(smem, L::kV),
           *qs = at<uint16_t>(smem, L::kQ), *dos = at<uint16_t>(smem, L::kDo);
  float *scores = at<float>(smem, L::kS) + warp * kWarpRows * St::kScore;
  float *dprobs = at<float>(smem, L::kDp) + warp * kWarpRows * St::kScore;
  uint16_t *probs = at<uint16_t>(smem, L::kP) + warp * kWarpRows * St::kProb;
  uint16_t *dscores = at<uint16_t>(smem, L::kDs) + warp * kWarpRows * St::kProb;
  float *lseTile = at<float>(smem, L::kLse),
        *deltaTile = at<float>(smem, L::kDelta);

  loadKeyValueTiles<D>(simt, args, ks, vs, b, k0, g);

  typename Simt::FragC dk[D / 16], dv[D / 16];
  for (int n = 0; n < D / 16; ++n) {
    simt.zero(dk[n]);
    simt.zero(dv[n]);
  }
  int r = lane / 2, half = lane % 2;
  int64_t key = k0 + warp * kWarpRows + r;
  const uint16_t *warpK = ks + warp * kWarpRows * St::kRow;
  const uint16_t *warpV = vs + warp * kWarpRows * St::kRow;

  for (int64_t h = g * shape.group(); h < (g + 1) * shape.group(); ++h)
    for (int64_t qTile = kTileIndex; qTile < shape.tiles(); ++qTile) {
      int64_t q0 = qTile * kTile;
      loadTile<D>(simt, qs, args.q + shape.qOffset(b, q0, h), shape.qStride(),
                  shape.S - q0, shape.headDim);
      loadTile<D>(simt, dos, args.dout + shape.qOffset(b, q0, h),
                  shape.qStride(), shape.S - q0, shape.headDim);
      for (int e = simt.thread(); e < kTile; e += kBlockThreads) {
        bool valid = q0 + e < shape.S;
        int64_t row = shape.rowIndex(b, h, valid ? q0 + e : 0);
        lseTile[e] = valid ? args.lse[row] * kLog2e : 0.0f;
        deltaTile[e] = valid ? args.delta[row] : 0.0f;
      }
      simt.syncThreads();

      // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys.
      rowsTimesTileT<D, Simt, 1>(simt, warpK, qs, scores);
      rowsTimesTileT<D, Simt, 1>(simt, warpV, dos, dprobs);
      simt.syncWarp();
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        int64_t query = q0 + c;
        bool valid = query >= key && query < shape.S && key < shape.S;
        float p = valid ? exp2f(scores[r * St::kScore + c] * shape.scaleLog2 -
                                lseTile[c])
                        : 0.0f;
        float ds = p * (dprobs[r * St::kScore + c] - deltaTile[c]);
        probs[r * St::kProb + c] = simt.toBf16(p);
        dscores[r * St::kProb + c] = simt.toBf16(ds);
      }
      simt.syncWarp();
      // dV += P^T dO, dK += dS^T Q (scale applied once at the end).
      probsTimesTile<D>(simt, probs, dos, dv);
      probsTimesTile<D>(simt, dscores, qs, dk);
      // Q and dO are overwritten next.
      simt.syncThreads();
    }

  // Q and dO's tiles are free now: each warp stages its rows there.
  float *staging = at<float>(smem, L::kQ) + warp * kWarpRows * St::kAcc;
  int64_t rows = shape.S - (k0 + warp * kWarpRows);
  int64_t first = shape.kvOffset(b, k0 + warp * kWarpRows, g);
  storeAccumulators<D>(simt, dv, 1.0f, staging, args.dv + first,
                       shape.kvStride(), rows, shape.headDim);
  simt.syncWarp();
  storeAccumulators<D>(simt, dk, shape.scale, staging, args.dk + first,
                       shape.kvStride(), rows, shape.headDim);
}

/// dq of one query tile of one head (a QueryTileBlock), the keys up to the
/// diagonal in order; warp w owns query rows q0 + 16 w ...
template <int D, typename Simt>
MOE_SIMT_FN void queryGradBlock(const Simt &simt, const BackwardArgs &args) {
  using St = Strides<D>;
  using L = QueryGradLayout<D>;
  const Shape &shape = args.shape;
  unsigned char *smem = simt.shared();
  auto [warp, lane, qTile, h, b, g, q0] = QueryTileBlock::of(simt, shape);

  uint16_t *qs = at<uint16_t>(smem, L::kQ), *dos = at<uint16_t>(smem, L::kDo),
           *ks = at<uint16_t>(smem, L::kK), *vs = at<uint16_t>(smem, L::kV);
  float *scores = at<float>(smem, L::kS) + warp * kWarpRows * St::kScore;
  float *dprobs = at<float>(smem, L::kDp) + warp * kWarpRows * St::kScore;
  uint16_t *dscores = at<uint16_t>(smem, L::kDs) + warp * kWarpRows * St::kProb;

  loadTile<D>(simt, qs, args.q + shape.qOffset(b, q0, h), shape.qStride(),
              shape.S - q0, shape.headDim);
  loadTile<D>(simt, dos, args.dout + shape.qOffset(b, q0, h), shape.qStride(),
              shape.S - q0, shape.headDim);
  int r = lane / 2, half = lane % 2;
  int64_t query = q0 + warp * kWarpRows + r;
  bool validQuery = query < shape.S;
  int64_t row = shape.rowIndex(b, h, validQuery ? query : 0);
  float lse2 = validQuery ? args.lse[row] * kLog2e : 0.0f;
  float delta = validQuery ? args.delta[row] : 0.0f;

  typename Simt::FragC dq[D / 16];
  for (int n = 0; n < D / 16; ++n)
    simt.zero(dq[n]);
  const uint16_t *warpQ = qs + warp * kWarpRows * St::kRow;
  const uint16_t *warpDo = dos + warp * kWarpRows * St::kRow;

  for (int64_t kTileIndex = 0; kTileIndex <= qTile; ++kTileIndex) {
    int64_t k0 = kTileIndex * kTile;
    loadKeyValueTiles<D>(simt, args, ks, vs, b, k0, g);
    simt.syncThreads();

    rowsTimesTileT<D>(simt, warpQ, ks, scores);
    rowsTimesTileT<D>(simt, warpDo, vs, dprobs);
    simt.syncWarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      int64_t key = k0 + c;
      bool valid = key <= query && key < shape.S && validQuery;
      float p = valid
                    ? exp2f(scores[r * St::kScore + c] * shape.scaleLog2 - lse2)
                    : 0.0f;
      dscores[r * St::kProb + c] =
          simt.toBf16(p * (dprobs[r * St::kScore + c] - delta));
    }
    simt.syncWarp();
    probsTimesTile<D>(simt, dscores, ks, dq);
    simt.syncThreads();
  }

  float *staging = at<float>(smem, L::kK) + warp * kWarpRows * St::kAcc;
  int64_t rows = shape.S - (q0 + warp * kWarpRows);
  storeAccumulators<D>(simt, dq, shape.scale, staging,
                       args.dq + shape.qOffset(b, q0 + warp * kWarpRows, h),
                       shape.qStride(), rows, shape.headDim);
}

} // namespace moe::rt::cuda::flash

#endif // MOE_LIB_RUNTIME_CUDA_FLASHATTENTIONBLOCKS_H
