//===- Attention.cpp - Causal grouped-query attention ---------------------===//
//
// FlashAttention's tiling on the CPU: queries and keys in blocks of 64, so
// that every tile (a block of scores, one head's rows of q, k, v, the output
// accumulators) stays in the L1 or L2 cache, whatever the sequence length;
// no S x S matrix and no O(S) scratch exist. The tiles' small GEMMs are
// detail::tileGemm (vectorised for AVX-512, AVX2 or the baseline, picked at
// load time), the softmax's max, exp and sums detail::rowMax and
// expShiftedSum.
//
// Forward: one task of the kernels' pool (ThreadPool.h) per (batch, head,
// query block). Each walks the key blocks up to the diagonal with an online
// softmax: running max m and sum l per row, the output accumulator rescaled
// by exp(m_old - m_new) when the max grows; at the end out = acc / l and
// lse = m + log l.
//
// Backward: one task per (batch, key/value head), which owns that head's dk
// and dv and its query heads' dq. For each key block it recomputes
// P = exp(s - lse) against every query block at or past it (each head of
// the group in order), and accumulates dv += P^T do, dk += c dS^T q and
// dq += c dS k with dS = P (do v^T - D), D = do . o per row.
//
// With document positions (document masking), a query sees the keys of
// its own document up to itself, a contiguous range of each key block;
// blocks before its document's start are skipped.
//
// Ring attention (context parallelism) runs the same tiles on a chunk of
// queries against a chunk of keys elsewhere in the sequence (an offset
// between their starts), and merges each chunk's output into the running
// one with the online softmax's rule; its backward recomputes each chunk's
// probabilities from the final lse, as FlashAttention's does.
//
// Every sum runs in a fixed order inside one task (key blocks in order,
// heads in order, query blocks in order), so results are bitwise
// reproducible, and the same for any thread count.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"
#include "ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace moe::rt::cpu {

namespace {
constexpr int64_t kBlock = kAttentionBlock;

/// Strided views of one (batch, query head) and its key/value head: the
/// query and key rows of headDim, the value and output rows of valueDim.
struct HeadView {
  int64_t ldq, ldkv, ldo, ldv;
  int64_t qOffset, kvOffset, oOffset, vOffset;

  /// Sq query (and output) rows and Sk key (and value) rows per sequence.
  HeadView(int64_t b, int64_t h, int64_t Sq, int64_t Sk, int64_t heads,
           int64_t kvHeads, int64_t headDim, int64_t valueDim) {
    int64_t group = heads / kvHeads;
    int64_t g = h / group;
    ldq = heads * headDim;
    ldkv = kvHeads * headDim;
    ldo = heads * valueDim;
    ldv = kvHeads * valueDim;
    qOffset = b * Sq * ldq + h * headDim;
    kvOffset = b * Sk * ldkv + g * headDim;
    oOffset = b * Sq * ldo + h * valueDim;
    vOffset = b * Sk * ldv + g * valueDim;
  }
};

/// packed[e, c] = x[c, e] for the block's `cols` rows of x (leading
/// dimension ld), zero for c in [cols, kBlock): the transposed tile that
/// makes q k^T a tileGemm.
void packTransposed(const float *x, int64_t ld, int64_t cols, int64_t headDim,
                    float *packed) {
  for (int64_t e = 0; e < headDim; ++e) {
    float *row = packed + e * kBlock;
    for (int64_t c = 0; c < cols; ++c)
      row[c] = x[c * ld + e];
    std::fill(row + cols, row + kBlock, 0.0f);
  }
}

/// The keys a query sees: [first(i), i + offset], its document's up to
/// itself, in the keys' rows: query i is key row i + offset (a chunk of
/// keys elsewhere in the sequence: ring attention's offset of the query
/// chunk's start from the key chunk's). Without document positions every
/// query's document starts before the first key (plain causal
/// attention); with them, query i of sequence b is at position
/// positions[b, i] of a document that starts at key row i + offset -
/// positions[b, i]. first(i) never decreases with i: documents are
/// contiguous runs.
struct VisibleKeys {
  const int32_t *positions; // this sequence's queries' [Sq], or null
  int64_t offset = 0;

  int64_t first(int64_t i) const {
    return positions ? i + offset - positions[i] : 0;
  }
  /// The last key query i sees (may be < 0: none).
  int64_t last(int64_t i) const { return i + offset; }
  /// The keys of block [j0, j0 + cols) that query i sees, as [begin, end)
  /// in the block's columns (empty: begin == end).
  std::pair<int64_t, int64_t> inBlock(int64_t i, int64_t j0,
                                      int64_t cols) const {
    int64_t begin = std::clamp<int64_t>(first(i) - j0, 0, cols);
    int64_t end = std::clamp<int64_t>(last(i) - j0 + 1, begin, cols);
    return {begin, end};
  }
};

/// One worker's tiles.
struct Tiles {
  std::vector<float> keysT, valuesT, scores, grads, transposed, acc, accV;
  std::vector<double> sums;
  std::vector<float> maxes, deltas;

  /// acc is the forward's output (valueDim wide) or the backward's dk
  /// (headDim wide).
  Tiles(int64_t headDim, int64_t valueDim, bool backward)
      : keysT(headDim * kBlock), scores(kBlock * kBlock),
        acc(kBlock * (backward ? headDim : valueDim)), maxes(kBlock) {
    if (backward) {
      valuesT.resize(valueDim * kBlock);
      grads.resize(kBlock * kBlock);
      transposed.resize(kBlock * kBlock);
      accV.resize(kBlock * valueDim);
      deltas.resize(kBlock);
    } else {
      sums.resize(kBlock);
    }
  }
};

/// out[c, r] = in[r, c] for a rows x kBlock tile.
void transposeTile(const float *in, int64_t rows, float *out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < kBlock; ++c)
      out[c * kBlock + r] = in[r * kBlock + c];
}

/// One Tiles per worker that `tasks` tasks can use.
std::vector<Tiles> tilesPerWorker(int64_t tasks, int64_t headDim,
                                  int64_t valueDim, bool backward) {
  std::vector<Tiles> tiles;
  int64_t workers = std::min<int64_t>(detail::availableThreads(), tasks);
  tiles.reserve(workers);
  for (int64_t w = 0; w < workers; ++w)
    tiles.emplace_back(headDim, valueDim, backward);
  return tiles;
}
} // namespace

namespace {
/// The offset of a run's queries from the keys: query row i of the run
/// is at key row i + offset.
int64_t runOffset(const SequenceRun &run, int64_t keyStart) {
  return run.whole - run.local - keyStart;
}

/// A block of up to kBlock query rows of one run.
struct QueryBlock {
  int64_t i0, rows, offset;
};

/// The query blocks of `runs`, the latest in the sequence (which see the
/// most keys) first.
std::vector<QueryBlock> queryBlocks(const std::vector<SequenceRun> &runs,
                                    int64_t keyStart) {
  std::vector<QueryBlock> blocks;
  for (const SequenceRun &run : runs)
    for (int64_t i0 = run.local; i0 < run.local + run.length; i0 += kBlock)
      blocks.push_back({i0, std::min(kBlock, run.local + run.length - i0),
                        runOffset(run, keyStart)});
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const QueryBlock &a, const QueryBlock &b) {
                     return a.i0 + a.offset > b.i0 + b.offset;
                   });
  return blocks;
}

/// Attention of the Sq queries that `runs` place in the sequence over the
/// Sk keys from `keyStart` on, each query seeing the keys `VisibleKeys`
/// gives it; a query that sees none gets lse = -inf and a zero output.
void forwardTiles(const float *q, const float *k, const float *v, float *out,
                  float *lse, int64_t B, int64_t Sq, int64_t Sk, int64_t heads,
                  int64_t kvHeads, int64_t headDim, int64_t valueDim,
                  const int32_t *positions,
                  const std::vector<SequenceRun> &runs, int64_t keyStart,
                  float scaleFactor) {
  if (B <= 0 || Sq <= 0 || heads <= 0 || headDim <= 0 || valueDim <= 0)
    return;
  float scale = scaleFactor / std::sqrt(static_cast<float>(headDim));
  std::vector<QueryBlock> blocks = queryBlocks(runs, keyStart);
  int64_t perHead = static_cast<int64_t>(blocks.size());
  int64_t tasks = B * heads * perHead;
  std::vector<Tiles> tiles = tilesPerWorker(tasks, headDim, valueDim, false);
  detail::parallelFor(tasks, [&](int64_t task, int worker) {
    Tiles &t = tiles[worker];
    const QueryBlock &block = blocks[task % perHead];
    int64_t b = task / perHead / heads, h = task / perHead % heads;
    HeadView view(b, h, Sq, Sk, heads, kvHeads, headDim, valueDim);
    VisibleKeys visible{positions ? positions + b * Sq : nullptr, block.offset};
    int64_t i0 = block.i0, rows = block.rows;
    const float *qBlock = q + view.qOffset + i0 * view.ldq;
    std::fill(t.maxes.begin(), t.maxes.end(),
              -std::numeric_limits<float>::infinity());
    std::fill(t.sums.begin(), t.sums.end(), 0.0);
    std::fill(t.acc.begin(), t.acc.end(), 0.0f);
    // From the block of the earliest key any of its queries sees.
    int64_t firstKey =
        std::max<int64_t>(0, visible.first(i0)) / kBlock * kBlock;
    int64_t keyEnd = std::min(Sk, visible.last(i0 + rows - 1) + 1);
    for (int64_t j0 = firstKey; j0 < keyEnd; j0 += kBlock) {
      int64_t cols = std::min(kBlock, Sk - j0);
      const float *kBlockRows = k + view.kvOffset + j0 * view.ldkv;
      packTransposed(kBlockRows, view.ldkv, cols, headDim, t.keysT.data());
      detail::tileGemm(qBlock, view.ldq, rows, headDim, t.keysT.data(), kBlock,
                       kBlock, scale, t.scores.data(), kBlock,
                       /*accumulate=*/false);
      for (int64_t r = 0; r < rows; ++r) {
        float *row = t.scores.data() + r * kBlock;
        auto [begin, end] = visible.inBlock(i0 + r, j0, cols);
        float *accRow = t.acc.data() + r * valueDim;
        if (begin == end) {
          std::fill(row, row + kBlock, 0.0f);
          continue;
        }
        float previous = t.maxes[r];
        float most =
            std::max(previous, detail::rowMax(row + begin, end - begin));
        // exp(s - m) of the new scores, and the old ones' rescaling.
        double sum =
            detail::expShiftedSum(row + begin, row + begin, end - begin, most);
        std::fill(row, row + begin, 0.0f);
        std::fill(row + end, row + kBlock, 0.0f);
        if (most != previous) {
          float rescale = std::exp(previous - most);
          t.sums[r] *= rescale;
          for (int64_t e = 0; e < valueDim; ++e)
            accRow[e] *= rescale;
        }
        t.sums[r] += sum;
        t.maxes[r] = most;
      }
      // acc += P v over the block's real keys.
      detail::tileGemm(t.scores.data(), kBlock, rows, cols,
                       v + view.vOffset + j0 * view.ldv, view.ldv, valueDim,
                       1.0f, t.acc.data(), valueDim, /*accumulate=*/true);
    }
    float *lseRow = lse + (b * heads + h) * Sq + i0;
    for (int64_t r = 0; r < rows; ++r) {
      double sum = t.sums[r];
      float *outRow = out + view.oOffset + (i0 + r) * view.ldo;
      if (sum == 0.0) {
        lseRow[r] = -std::numeric_limits<float>::infinity();
        std::fill_n(outRow, valueDim, 0.0f);
        continue;
      }
      lseRow[r] = t.maxes[r] + static_cast<float>(std::log(sum));
      float inverse = static_cast<float>(1.0 / sum);
      const float *accRow = t.acc.data() + r * valueDim;
      for (int64_t e = 0; e < valueDim; ++e)
        outRow[e] = accRow[e] * inverse;
    }
  });
}

/// The gradients of forwardTiles' attention given its (final) out and
/// lse; dq, dk and dv are overwritten.
void backwardTiles(const float *dout, const float *q, const float *k,
                   const float *v, const float *out, const float *lse,
                   float *dq, float *dk, float *dv, int64_t B, int64_t Sq,
                   int64_t Sk, int64_t heads, int64_t kvHeads, int64_t headDim,
                   int64_t valueDim, const int32_t *positions,
                   const std::vector<SequenceRun> &runs, int64_t keyStart,
                   float scaleFactor) {
  std::fill(dk, dk + B * Sk * kvHeads * headDim, 0.0f);
  std::fill(dv, dv + B * Sk * kvHeads * valueDim, 0.0f);
  std::fill(dq, dq + B * Sq * heads * headDim, 0.0f);
  if (B <= 0 || Sq <= 0 || Sk <= 0 || heads <= 0 || headDim <= 0 ||
      valueDim <= 0)
    return;
  float scale = scaleFactor / std::sqrt(static_cast<float>(headDim));
  int64_t group = heads / kvHeads, tasks = B * kvHeads;
  std::vector<Tiles> tiles = tilesPerWorker(tasks, headDim, valueDim, true);
  detail::parallelFor(tasks, [&](int64_t task, int worker) {
    Tiles &t = tiles[worker];
    int64_t b = task / kvHeads, g = task % kvHeads;
    HeadView kvView(b, g * group, Sq, Sk, heads, kvHeads, headDim, valueDim);
    for (int64_t j0 = 0; j0 < Sk; j0 += kBlock) {
      int64_t cols = std::min(kBlock, Sk - j0);
      const float *kRows = k + kvView.kvOffset + j0 * kvView.ldkv;
      const float *vRows = v + kvView.vOffset + j0 * kvView.ldv;
      packTransposed(kRows, kvView.ldkv, cols, headDim, t.keysT.data());
      packTransposed(vRows, kvView.ldv, cols, valueDim, t.valuesT.data());
      std::fill(t.acc.begin(), t.acc.end(), 0.0f);   // dk of the block
      std::fill(t.accV.begin(), t.accV.end(), 0.0f); // dv of the block
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        HeadView view(b, h, Sq, Sk, heads, kvHeads, headDim, valueDim);
        const float *lseRow = lse + (b * heads + h) * Sq;
        for (const SequenceRun &run : runs) {
          int64_t offset = runOffset(run, keyStart);
          int64_t runEnd = run.local + run.length;
          VisibleKeys visible{positions ? positions + b * Sq : nullptr, offset};
          // Query blocks of the run that see any key of this block: from the
          // block of the first query reaching j0, until the documents of
          // their queries start past it.
          int64_t firstQuery = std::max<int64_t>(run.local, j0 - offset);
          for (int64_t i0 =
                   run.local + (firstQuery - run.local) / kBlock * kBlock;
               i0 < runEnd && visible.first(i0) < j0 + cols; i0 += kBlock) {
            int64_t rows = std::min(kBlock, runEnd - i0);
            const float *qBlock = q + view.qOffset + i0 * view.ldq;
            const float *doBlock = dout + view.oOffset + i0 * view.ldo;
            const float *oBlock = out + view.oOffset + i0 * view.ldo;
            float *dqBlock = dq + view.qOffset + i0 * view.ldq;
            float *probs = t.scores.data(), *dprobs = t.grads.data();
            detail::tileGemm(qBlock, view.ldq, rows, headDim, t.keysT.data(),
                             kBlock, kBlock, scale, probs, kBlock, false);
            for (int64_t r = 0; r < rows; ++r) {
              float *row = probs + r * kBlock;
              auto [begin, end] = visible.inBlock(i0 + r, j0, cols);
              detail::expShifted(row + begin, row + begin, end - begin,
                                 lseRow[i0 + r]);
              std::fill(row, row + begin, 0.0f);
              std::fill(row + end, row + kBlock, 0.0f);
              // D = do . o (= sum_j P dP, the softmax Jacobian's rank-one
              // term).
              double d = 0.0;
              for (int64_t e = 0; e < valueDim; ++e)
                d += static_cast<double>(doBlock[r * view.ldo + e]) *
                     oBlock[r * view.ldo + e];
              t.deltas[r] = static_cast<float>(d);
            }
            // dv += P^T do.
            transposeTile(probs, rows, t.transposed.data());
            detail::tileGemm(t.transposed.data(), kBlock, cols, rows, doBlock,
                             view.ldo, valueDim, 1.0f, t.accV.data(), valueDim,
                             true);
            // dP = do v^T, then dS = P (dP - D) in place.
            detail::tileGemm(doBlock, view.ldo, rows, valueDim,
                             t.valuesT.data(), kBlock, kBlock, 1.0f, dprobs,
                             kBlock, false);
            for (int64_t r = 0; r < rows; ++r) {
              const float *p = probs + r * kBlock;
              float *ds = dprobs + r * kBlock;
              for (int64_t c = 0; c < kBlock; ++c)
                ds[c] = p[c] * (ds[c] - t.deltas[r]);
            }
            // dq += c dS k, dk += c dS^T q.
            detail::tileGemm(dprobs, kBlock, rows, cols, kRows, kvView.ldkv,
                             headDim, scale, dqBlock, view.ldq, true);
            transposeTile(dprobs, rows, t.transposed.data());
            detail::tileGemm(t.transposed.data(), kBlock, cols, rows, qBlock,
                             view.ldq, headDim, scale, t.acc.data(), headDim,
                             true);
          }
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        std::copy_n(t.acc.data() + c * headDim, headDim,
                    dk + kvView.kvOffset + (j0 + c) * kvView.ldkv);
        std::copy_n(t.accV.data() + c * valueDim, valueDim,
                    dv + kvView.vOffset + (j0 + c) * kvView.ldv);
      }
    }
  });
}
} // namespace

void attentionForward(const float *q, const float *k, const float *v,
                      float *out, float *lse, int64_t B, int64_t S,
                      int64_t heads, int64_t kvHeads, int64_t headDim,
                      int64_t valueDim, const int32_t *positions, float scaleFactor) {
  forwardTiles(q, k, v, out, lse, B, S, S, heads, kvHeads, headDim,
               valueDim < 0 ? headDim : valueDim, positions, {{0, 0, S}},
               /*keyStart=*/0, scaleFactor);
}

void attentionBackward(const float *dout, const float *q, const float *k,
                       const float *v, const float *out, const float *lse,
                       float *dq, float *dk, float *dv, int64_t B, int64_t S,
                       int64_t heads, int64_t kvHeads, int64_t headDim,
                       int64_t valueDim, const int32_t *positions, float scaleFactor) {
  backwardTiles(dout, q, k, v, out, lse, dq, dk, dv, B, S, S, heads, kvHeads,
                headDim, valueDim < 0 ? headDim : valueDim, positions,
                {{0, 0, S}}, /*keyStart=*/0, scaleFactor);
}

void attentionBlockForward(const float *q, const float *k, const float *v,
                           float *out, float *lse, int64_t B, int64_t Sq,
                           int64_t Sk, const std::vector<SequenceRun> &runs,
                           int64_t heads, int64_t kvHeads, int64_t headDim,
                           int64_t valueDim, const int32_t *positions, float scaleFactor) {
  forwardTiles(q, k, v, out, lse, B, Sq, Sk, heads, kvHeads, headDim,
               valueDim < 0 ? headDim : valueDim, positions, runs,
               /*keyStart=*/0, scaleFactor);
}

void attentionBlockBackward(const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            float *dq, float *dk, float *dv, int64_t B,
                            int64_t Sq, int64_t Sk,
                            const std::vector<SequenceRun> &runs, int64_t heads,
                            int64_t kvHeads, int64_t headDim, int64_t valueDim,
                            const int32_t *positions, float scaleFactor) {
  backwardTiles(dout, q, k, v, out, lse, dq, dk, dv, B, Sq, Sk, heads, kvHeads,
                headDim, valueDim < 0 ? headDim : valueDim, positions, runs,
                /*keyStart=*/0, scaleFactor);
}

void attentionChunkForward(const float *q, const float *k, const float *v,
                           float *out, float *lse, int64_t B, int64_t Sq,
                           int64_t Sk, int64_t queryStart, int64_t keyStart,
                           int64_t heads, int64_t kvHeads, int64_t headDim,
                           int64_t valueDim, const int32_t *positions, float scaleFactor) {
  if (valueDim < 0)
    valueDim = headDim;
  std::vector<float> part(B * Sq * heads * valueDim), partLse(B * heads * Sq);
  forwardTiles(q, k, v, part.data(), partLse.data(), B, Sq, Sk, heads, kvHeads,
               headDim, valueDim, positions, {{0, queryStart, Sq}}, keyStart,
               scaleFactor);
  // The online softmax over chunks: lse = log(e^lse + e^lse'), and each
  // output weighted by its share, in double.
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  detail::forEachShare(B * Sq, /*grain=*/16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t b = row / Sq, i = row % Sq;
      for (int64_t h = 0; h < heads; ++h) {
        float &total = lse[(b * heads + h) * Sq + i];
        float added = partLse[(b * heads + h) * Sq + i];
        float *o = out + (row * heads + h) * valueDim;
        const float *o2 = part.data() + (row * heads + h) * valueDim;
        if (added == kNone)
          continue;
        if (total == kNone) {
          std::copy_n(o2, valueDim, o);
          total = added;
          continue;
        }
        double most = std::max(total, added);
        double merged =
            most + std::log(std::exp(total - most) + std::exp(added - most));
        double keep = std::exp(total - merged), take = std::exp(added - merged);
        for (int64_t e = 0; e < valueDim; ++e)
          o[e] = static_cast<float>(keep * o[e] + take * o2[e]);
        total = static_cast<float>(merged);
      }
    }
  });
}

void attentionChunkBackward(const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            float *dq, float *dk, float *dv, int64_t B,
                            int64_t Sq, int64_t Sk, int64_t queryStart,
                            int64_t keyStart, int64_t heads, int64_t kvHeads,
                            int64_t headDim, int64_t valueDim,
                            const int32_t *positions, float scaleFactor) {
  if (valueDim < 0)
    valueDim = headDim;
  std::vector<float> dqPart(B * Sq * heads * headDim),
      dkPart(B * Sk * kvHeads * headDim), dvPart(B * Sk * kvHeads * valueDim);
  backwardTiles(dout, q, k, v, out, lse, dqPart.data(), dkPart.data(),
                dvPart.data(), B, Sq, Sk, heads, kvHeads, headDim, valueDim,
                positions, {{0, queryStart, Sq}}, keyStart, scaleFactor);
  for (size_t i = 0; i < dqPart.size(); ++i)
    dq[i] += dqPart[i];
  for (size_t i = 0; i < dkPart.size(); ++i)
    dk[i] += dkPart[i];
  for (size_t i = 0; i < dvPart.size(); ++i)
    dv[i] += dvPart[i];
}

} // namespace moe::rt::cpu
