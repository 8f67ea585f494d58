//===- AttentionTest.cpp - Tests of causal grouped-query attention --------===//

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/StepSemantics.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

/// Heads of d for queries and keys and of valueDim (0: d, MLA: its own)
/// for values and the output.
struct Shape {
  int64_t B, S, heads, kvHeads, d, valueDim = 0;
  int64_t dv() const { return valueDim > 0 ? valueDim : d; }
  int64_t qSize() const { return B * S * heads * d; }
  int64_t kvSize() const { return B * S * kvHeads * d; }
  int64_t vSize() const { return B * S * kvHeads * dv(); }
  int64_t oSize() const { return B * S * heads * dv(); }
  int64_t lseSize() const { return B * heads * S; }
  int64_t qIndex(int64_t b, int64_t s, int64_t h, int64_t e) const {
    return ((b * S + s) * heads + h) * d + e;
  }
  int64_t kvIndex(int64_t b, int64_t s, int64_t g, int64_t e) const {
    return ((b * S + s) * kvHeads + g) * d + e;
  }
  int64_t vIndex(int64_t b, int64_t s, int64_t g, int64_t e) const {
    return ((b * S + s) * kvHeads + g) * dv() + e;
  }
  int64_t oIndex(int64_t b, int64_t s, int64_t h, int64_t e) const {
    return ((b * S + s) * heads + h) * dv() + e;
  }
};

/// Each token's position in its document ([B, S]) for documents of the
/// given lengths, the same in every sequence (they must add up to S).
std::vector<int32_t> documentPositions(const Shape &sh,
                                       const std::vector<int64_t> &lengths) {
  std::vector<int32_t> positions;
  for (int64_t b = 0; b < sh.B; ++b)
    for (int64_t length : lengths)
      for (int64_t p = 0; p < length; ++p)
        positions.push_back(static_cast<int32_t>(p));
  return positions;
}

/// Probabilities of one (b, h) in double with an explicit causal mask, and
/// with `positions` (document masking) a mask of other documents too.
std::vector<double>
naiveProbs(const Shape &sh, const std::vector<float> &q,
           const std::vector<float> &k, int64_t b, int64_t h,
           std::vector<double> *lse = nullptr,
           const std::vector<int32_t> *positions = nullptr) {
  int64_t g = h / (sh.heads / sh.kvHeads);
  double c = 1.0 / std::sqrt(static_cast<double>(sh.d));
  std::vector<double> p(sh.S * sh.S);
  for (int64_t i = 0; i < sh.S; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < sh.S; ++j) {
      double s = 0.0;
      for (int64_t e = 0; e < sh.d; ++e)
        s += static_cast<double>(q[sh.qIndex(b, i, h, e)]) *
             k[sh.kvIndex(b, j, g, e)];
      int64_t first = positions ? i - (*positions)[b * sh.S + i] : 0;
      p[i * sh.S + j] = j <= i && j >= first
                            ? c * s
                            : -std::numeric_limits<double>::infinity();
      m = std::max(m, p[i * sh.S + j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < sh.S; ++j)
      sum += std::exp(p[i * sh.S + j] - m);
    double l = m + std::log(sum);
    if (lse)
      (*lse)[i] = l;
    for (int64_t j = 0; j < sh.S; ++j)
      p[i * sh.S + j] = std::exp(p[i * sh.S + j] - l);
  }
  return p;
}

void naiveForward(const Shape &sh, const std::vector<float> &q,
                  const std::vector<float> &k, const std::vector<float> &v,
                  std::vector<double> &out, std::vector<double> &lse,
                  const std::vector<int32_t> *positions = nullptr) {
  out.assign(sh.oSize(), 0.0);
  lse.assign(sh.lseSize(), 0.0);
  std::vector<double> rowLse(sh.S);
  for (int64_t b = 0; b < sh.B; ++b)
    for (int64_t h = 0; h < sh.heads; ++h) {
      int64_t g = h / (sh.heads / sh.kvHeads);
      auto p = naiveProbs(sh, q, k, b, h, &rowLse, positions);
      for (int64_t i = 0; i < sh.S; ++i) {
        lse[(b * sh.heads + h) * sh.S + i] = rowLse[i];
        for (int64_t e = 0; e < sh.dv(); ++e) {
          double o = 0.0;
          for (int64_t j = 0; j < sh.S; ++j)
            o += p[i * sh.S + j] * v[sh.vIndex(b, j, g, e)];
          out[sh.oIndex(b, i, h, e)] = o;
        }
      }
    }
}

/// Textbook backward through the full probability matrix, in double.
void naiveBackward(const Shape &sh, const std::vector<float> &dout,
                   const std::vector<float> &q, const std::vector<float> &k,
                   const std::vector<float> &v, std::vector<double> &dq,
                   std::vector<double> &dk, std::vector<double> &dv,
                   const std::vector<int32_t> *positions = nullptr) {
  dq.assign(sh.qSize(), 0.0);
  dk.assign(sh.kvSize(), 0.0);
  dv.assign(sh.vSize(), 0.0);
  double c = 1.0 / std::sqrt(static_cast<double>(sh.d));
  for (int64_t b = 0; b < sh.B; ++b)
    for (int64_t h = 0; h < sh.heads; ++h) {
      int64_t g = h / (sh.heads / sh.kvHeads);
      auto p = naiveProbs(sh, q, k, b, h, nullptr, positions);
      for (int64_t i = 0; i < sh.S; ++i) {
        std::vector<double> dp(sh.S);
        double rowDot = 0.0;
        for (int64_t j = 0; j < sh.S; ++j) {
          for (int64_t e = 0; e < sh.dv(); ++e) {
            dp[j] += dout[sh.oIndex(b, i, h, e)] * v[sh.vIndex(b, j, g, e)];
            dv[sh.vIndex(b, j, g, e)] +=
                p[i * sh.S + j] * dout[sh.oIndex(b, i, h, e)];
          }
          rowDot += p[i * sh.S + j] * dp[j];
        }
        for (int64_t j = 0; j < sh.S; ++j) {
          double ds = p[i * sh.S + j] * (dp[j] - rowDot);
          for (int64_t e = 0; e < sh.d; ++e) {
            dq[sh.qIndex(b, i, h, e)] += c * ds * k[sh.kvIndex(b, j, g, e)];
            dk[sh.kvIndex(b, j, g, e)] += c * ds * q[sh.qIndex(b, i, h, e)];
          }
        }
      }
    }
}

void expectNear(const std::vector<float> &got, const std::vector<double> &want,
                double tol, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i]))) &&
        bad++ == 0)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want "
                    << want[i];
  EXPECT_EQ(bad, 0) << what;
}

class AttentionForwardTest : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionForwardTest, MatchesNaive) {
  Shape sh = GetParam();
  auto q = randomVector(sh.qSize(), 61), k = randomVector(sh.kvSize(), 62);
  auto v = randomVector(sh.vSize(), 63);
  std::vector<float> out(sh.oSize()), lse(sh.lseSize());
  attentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), sh.B,
                   sh.S, sh.heads, sh.kvHeads, sh.d, sh.dv());
  std::vector<double> refOut, refLse;
  naiveForward(sh, q, k, v, refOut, refLse);
  expectNear(out, refOut, 1e-5, "out");
  expectNear(lse, refLse, 1e-5, "lse");
}

// GQA, MHA and MQA; S = 150 spans three 64-row blocks, the last partial;
// values narrower and wider than the keys (MLA's v_head_dim).
INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionForwardTest,
    ::testing::Values(Shape{2, 150, 4, 2, 8}, Shape{1, 7, 3, 3, 4},
                      Shape{2, 65, 4, 1, 16}, Shape{1, 1, 2, 1, 4},
                      Shape{2, 70, 4, 4, 12, 8}, Shape{1, 9, 4, 2, 6, 10}),
    [](const ::testing::TestParamInfo<Shape> &info) {
      const Shape &s = info.param;
      return "B" + std::to_string(s.B) + "S" + std::to_string(s.S) + "H" +
             std::to_string(s.heads) + "Kv" + std::to_string(s.kvHeads) + "D" +
             std::to_string(s.d) + "Dv" + std::to_string(s.dv());
    });

TEST(AttentionTest, FirstRowCopiesFirstValue) {
  // Row 0 attends only to key 0, whatever the scores.
  Shape sh{1, 4, 2, 1, 4};
  auto q = randomVector(sh.qSize(), 64, -5.0f, 5.0f);
  auto k = randomVector(sh.kvSize(), 65, -5.0f, 5.0f);
  auto v = randomVector(sh.kvSize(), 66);
  std::vector<float> out(sh.qSize()), lse(sh.lseSize());
  attentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), sh.B,
                   sh.S, sh.heads, sh.kvHeads, sh.d);
  for (int64_t h = 0; h < sh.heads; ++h)
    for (int64_t e = 0; e < sh.d; ++e)
      EXPECT_FLOAT_EQ(out[sh.qIndex(0, 0, h, e)], v[sh.kvIndex(0, 0, 0, e)]);
}

/// Runs the backward and returns L = sum(dout . attention(q, k, v)) as a
/// closure for the finite-difference checker.
struct BackwardCase {
  Shape sh;
  /// Document masking's positions, or empty.
  std::vector<int32_t> positions;
  std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;

  explicit BackwardCase(Shape shape, float range = 1.0f,
                        std::vector<int32_t> documentPositions = {})
      : sh(shape), positions(std::move(documentPositions)),
        q(randomVector(sh.qSize(), 67, -range, range)),
        k(randomVector(sh.kvSize(), 68, -range, range)),
        v(randomVector(sh.vSize(), 69)), dout(randomVector(sh.oSize(), 70)),
        out(sh.oSize()), lse(sh.lseSize()), dq(sh.qSize()), dk(sh.kvSize()),
        dv(sh.vSize()) {
    forward();
    attentionBackward(dout.data(), q.data(), k.data(), v.data(), out.data(),
                      lse.data(), dq.data(), dk.data(), dv.data(), sh.B, sh.S,
                      sh.heads, sh.kvHeads, sh.d, sh.dv(), positionsOrNull());
  }
  const int32_t *positionsOrNull() const {
    return positions.empty() ? nullptr : positions.data();
  }
  void forward() {
    attentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), sh.B,
                     sh.S, sh.heads, sh.kvHeads, sh.d, sh.dv(),
                     positionsOrNull());
  }
  double loss() {
    forward();
    return dotDouble(dout.data(), out.data(), sh.oSize());
  }
};

TEST(AttentionTest, BackwardMatchesFiniteDifferencesGqa) {
  BackwardCase c(Shape{2, 5, 4, 2, 4}, 2.0f);
  auto loss = [&] { return c.loss(); };
  GradCheckOptions options;
  EXPECT_GRADIENT("dq", c.q, c.dq, loss, options);
  EXPECT_GRADIENT("dk", c.k, c.dk, loss, options);
  EXPECT_GRADIENT("dv", c.v, c.dv, loss, options);
}

TEST(AttentionTest, BackwardMatchesFiniteDifferencesAcrossBlocks) {
  // S = 70 crosses the 64-row block boundary; sample the elements. Values
  // as wide as the keys, and (MLA) narrower.
  for (Shape sh : {Shape{1, 70, 4, 2, 8}, Shape{1, 70, 2, 2, 12, 8}}) {
    BackwardCase c(sh, 2.0f);
    auto loss = [&] { return c.loss(); };
    GradCheckOptions options;
    options.maxSamples = 120;
    EXPECT_GRADIENT("dq", c.q, c.dq, loss, options);
    EXPECT_GRADIENT("dk", c.k, c.dk, loss, options);
    EXPECT_GRADIENT("dv", c.v, c.dv, loss, options);
  }
}

TEST(AttentionTest, BackwardMatchesNaiveBackward) {
  // Values as wide as the keys, narrower and wider (MLA's v_head_dim).
  for (Shape sh : {Shape{2, 133, 4, 2, 8}, Shape{2, 133, 4, 2, 12, 8},
                   Shape{1, 66, 2, 1, 4, 10}}) {
    BackwardCase c(sh);
    std::vector<double> dq, dk, dv;
    naiveBackward(sh, c.dout, c.q, c.k, c.v, dq, dk, dv);
    expectNear(c.dq, dq, 1e-4, "dq");
    expectNear(c.dk, dk, 1e-4, "dk");
    expectNear(c.dv, dv, 1e-4, "dv");
  }
}

// Document masking: each query sees the keys of its own document up to
// itself. Documents of 70 (across a block boundary), 1, 64 (exactly a
// block, not aligned) and 65 tokens: the query block from 128 on sees no
// key of blocks 0 and 64 for its rows from 135, and the last document's
// queries skip them whole.
TEST(AttentionTest, DocumentMaskingMatchesNaive) {
  for (Shape sh : {Shape{2, 200, 4, 2, 8}, Shape{1, 200, 2, 2, 12, 8}}) {
    std::vector<int32_t> positions = documentPositions(sh, {70, 1, 64, 65});
    BackwardCase c(sh, 1.0f, positions);
    std::vector<double> out, lse, dq, dk, dv;
    naiveForward(sh, c.q, c.k, c.v, out, lse, &positions);
    expectNear(c.out, out, 1e-5, "out");
    expectNear(c.lse, lse, 1e-5, "lse");
    naiveBackward(sh, c.dout, c.q, c.k, c.v, dq, dk, dv, &positions);
    expectNear(c.dq, dq, 1e-4, "dq");
    expectNear(c.dk, dk, 1e-4, "dk");
    expectNear(c.dv, dv, 1e-4, "dv");
  }
}

// A masked step is the documents' steps: each document run as a sequence
// of its own gives the same rows, and the keys of one document get no
// gradient from another's queries.
TEST(AttentionTest, DocumentMaskingIsEachDocumentAlone) {
  Shape sh{1, 150, 2, 1, 8};
  std::vector<int64_t> lengths = {80, 70};
  BackwardCase whole(sh, 1.0f, documentPositions(sh, lengths));
  int64_t start = 0;
  for (int64_t length : lengths) {
    Shape part{1, length, sh.heads, sh.kvHeads, sh.d};
    auto slice = [&](const std::vector<float> &x, int64_t width) {
      return std::vector<float>(x.begin() + start * width,
                                x.begin() + (start + length) * width);
    };
    int64_t qWidth = sh.heads * sh.d, kvWidth = sh.kvHeads * sh.d;
    std::vector<float> q = slice(whole.q, qWidth), k = slice(whole.k, kvWidth),
                       v = slice(whole.v, kvWidth),
                       dout = slice(whole.dout, qWidth);
    std::vector<float> out(part.oSize()), lse(part.lseSize()), dq(part.qSize()),
        dk(part.kvSize()), dv(part.vSize());
    attentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), 1,
                     length, sh.heads, sh.kvHeads, sh.d);
    attentionBackward(dout.data(), q.data(), k.data(), v.data(), out.data(),
                      lse.data(), dq.data(), dk.data(), dv.data(), 1, length,
                      sh.heads, sh.kvHeads, sh.d);
    auto near = [&](const std::vector<float> &alone,
                    const std::vector<float> &together, int64_t width,
                    const char *what) {
      std::vector<double> want(alone.begin(), alone.end());
      expectNear(slice(together, width), want, 1e-5, what);
    };
    near(out, whole.out, qWidth, "out");
    near(dq, whole.dq, qWidth, "dq");
    near(dk, whole.dk, kvWidth, "dk");
    near(dv, whole.dv, kvWidth, "dv");
    start += length;
  }
}

// Ring attention over cp ranks with Megatron's load balancing: the
// sequence is 2 cp chunks, rank r holds chunks r and 2 cp - 1 - r, and
// each of its query chunks meets every key/value chunk in ring order (its
// own rank's first). Chunks ahead of a query chunk are fully masked. The
// merged outputs and log-sum-exps, and the gradients summed over the chunk
// pairs (dk and dv travel back to their chunk's rank), are the whole
// sequence's attention's; with document masking too, documents spanning
// chunks and ranks.
TEST(AttentionTest, RingOfChunksIsTheWholeAttention) {
  for (auto [cp, documents] :
       {std::pair<int64_t, bool>{2, false}, {3, false}, {2, true}, {3, true}}) {
    // Chunks of 70 rows cross a 64-row tile; values narrower (MLA).
    const int64_t chunk = 70, chunks = 2 * cp;
    Shape sh{2, chunk * chunks, 4, 2, 8, 6};
    SCOPED_TRACE("cp = " + std::to_string(cp) +
                 (documents ? ", documents" : ""));
    std::vector<int32_t> positions;
    if (documents)
      positions = documentPositions(sh, {100, 1, 64, sh.S - 165});
    BackwardCase whole(sh, 1.0f, positions);
    int64_t qWidth = sh.heads * sh.d, kWidth = sh.kvHeads * sh.d;
    int64_t vWidth = sh.kvHeads * sh.dv(), oWidth = sh.heads * sh.dv();
    // Rows [c * chunk, (c + 1) * chunk) of every sequence of x.
    auto rowsOf = [&](const std::vector<float> &x, int64_t width, int64_t c) {
      std::vector<float> part(sh.B * chunk * width);
      for (int64_t b = 0; b < sh.B; ++b)
        std::copy_n(x.begin() + (b * sh.S + c * chunk) * width, chunk * width,
                    part.begin() + b * chunk * width);
      return part;
    };
    std::vector<float> dq(whole.dq.size()), dk(whole.dk.size(), 0.0f),
        dv(whole.dv.size(), 0.0f), out(whole.out.size()), lse(whole.lse.size());
    for (int64_t rank = 0; rank < cp; ++rank)
      for (int64_t qc : {rank, chunks - 1 - rank}) {
        std::vector<float> q = rowsOf(whole.q, qWidth, qc);
        std::vector<int32_t> qPositions;
        for (int64_t b = 0; documents && b < sh.B; ++b)
          qPositions.insert(qPositions.end(),
                            positions.begin() + b * sh.S + qc * chunk,
                            positions.begin() + b * sh.S + (qc + 1) * chunk);
        const int32_t *qPos = documents ? qPositions.data() : nullptr;
        std::vector<float> o(sh.B * chunk * oWidth, 0.0f),
            l(sh.B * sh.heads * chunk, -std::numeric_limits<float>::infinity());
        std::vector<float> dqChunk(q.size(), 0.0f);
        std::vector<float> dout = rowsOf(whole.dout, oWidth, qc);
        // The ring: the key/value chunks of rank, rank - 1, ... in turn.
        std::vector<int64_t> order;
        for (int64_t step = 0; step < cp; ++step) {
          int64_t from = (rank - step + cp) % cp;
          order.push_back(from);
          order.push_back(chunks - 1 - from);
        }
        for (int64_t kc : order)
          attentionChunkForward(q.data(), rowsOf(whole.k, kWidth, kc).data(),
                                rowsOf(whole.v, vWidth, kc).data(), o.data(),
                                l.data(), sh.B, chunk, chunk, qc * chunk,
                                kc * chunk, sh.heads, sh.kvHeads, sh.d, sh.dv(),
                                qPos);
        for (int64_t kc : order) {
          std::vector<float> dkChunk(sh.B * chunk * kWidth, 0.0f),
              dvChunk(sh.B * chunk * vWidth, 0.0f);
          attentionChunkBackward(
              dout.data(), q.data(), rowsOf(whole.k, kWidth, kc).data(),
              rowsOf(whole.v, vWidth, kc).data(), o.data(), l.data(),
              dqChunk.data(), dkChunk.data(), dvChunk.data(), sh.B, chunk,
              chunk, qc * chunk, kc * chunk, sh.heads, sh.kvHeads, sh.d,
              sh.dv(), qPos);
          for (int64_t b = 0; b < sh.B; ++b)
            for (int64_t r = 0; r < chunk * kWidth; ++r)
              dk[(b * sh.S + kc * chunk) * kWidth + r] +=
                  dkChunk[b * chunk * kWidth + r];
          for (int64_t b = 0; b < sh.B; ++b)
            for (int64_t r = 0; r < chunk * vWidth; ++r)
              dv[(b * sh.S + kc * chunk) * vWidth + r] +=
                  dvChunk[b * chunk * vWidth + r];
        }
        for (int64_t b = 0; b < sh.B; ++b) {
          std::copy_n(o.begin() + b * chunk * oWidth, chunk * oWidth,
                      out.begin() + (b * sh.S + qc * chunk) * oWidth);
          std::copy_n(dqChunk.begin() + b * chunk * qWidth, chunk * qWidth,
                      dq.begin() + (b * sh.S + qc * chunk) * qWidth);
          for (int64_t h = 0; h < sh.heads; ++h)
            std::copy_n(l.begin() + (b * sh.heads + h) * chunk, chunk,
                        lse.begin() + (b * sh.heads + h) * sh.S + qc * chunk);
        }
      }
    auto wide = [](const std::vector<float> &x) {
      return std::vector<double>(x.begin(), x.end());
    };
    expectNear(out, wide(whole.out), 1e-5, "out");
    expectNear(lse, wide(whole.lse), 1e-5, "lse");
    expectNear(dq, wide(whole.dq), 1e-5, "dq");
    expectNear(dk, wide(whole.dk), 1e-5, "dk");
    expectNear(dv, wide(whole.dv), 1e-5, "dv");
  }
}

// Context parallelism with the keys gathered: each rank's block of the
// load-balanced sequence (semantics::balancedRuns; cp ranks, each pair of
// chunks cut `inner` ways as tp's sequence split does) against the whole
// sequence's keys and values. Each block's out, lse and dq are the whole
// attention's rows, and dk and dv summed over the blocks are the whole's;
// with documents spanning chunks and ranks too.
TEST(AttentionTest, ABlockOfTheBalancedSequenceIsTheWholeAttentionsRows) {
  struct Case {
    int64_t cp, inner;
    bool documents;
  };
  for (Case c : {Case{2, 1, false}, Case{3, 1, false}, Case{2, 2, false},
                 Case{2, 1, true}, Case{3, 2, true}}) {
    const int64_t chunk = 70, parts = c.cp * c.inner;
    Shape sh{2, chunk * 2 * c.cp, 4, 2, 8, 6};
    SCOPED_TRACE("cp = " + std::to_string(c.cp) + ", inner = " +
                 std::to_string(c.inner) + (c.documents ? ", documents" : ""));
    std::vector<int32_t> positions;
    if (c.documents)
      positions = documentPositions(sh, {100, 1, 64, sh.S - 165});
    BackwardCase whole(sh, 1.0f, positions);
    int64_t qWidth = sh.heads * sh.d, kWidth = sh.kvHeads * sh.d;
    int64_t vWidth = sh.kvHeads * sh.dv(), oWidth = sh.heads * sh.dv();
    int64_t width = sh.S / parts;
    std::vector<double> dk(whole.dk.size(), 0.0), dv(whole.dv.size(), 0.0);
    for (int64_t g = 0; g < parts; ++g) {
      moe::rt::semantics::SequenceRuns block =
          moe::rt::semantics::balancedRuns(sh.S, c.cp, parts, g);
      std::vector<SequenceRun> runs;
      for (int i = 0; i < block.count; ++i)
        runs.push_back({block.local[i], block.whole[i], block.length[i]});
      // The block's rows of a [B, S, width] tensor, and back.
      auto rowsOf = [&](const auto &x, int64_t w) {
        std::vector<typename std::decay_t<decltype(x)>::value_type> part(
            sh.B * width * w);
        for (int64_t b = 0; b < sh.B; ++b)
          for (const SequenceRun &run : runs)
            std::copy_n(x.begin() + (b * sh.S + run.whole) * w, run.length * w,
                        part.begin() + (b * width + run.local) * w);
        return part;
      };
      std::vector<float> q = rowsOf(whole.q, qWidth),
                         dout = rowsOf(whole.dout, oWidth);
      std::vector<int32_t> blockPositions;
      if (c.documents)
        blockPositions = rowsOf(positions, 1);
      const int32_t *documents = c.documents ? blockPositions.data() : nullptr;
      std::vector<float> out(sh.B * width * oWidth),
          lse(sh.B * sh.heads * width), dq(q.size()), dkPart(whole.dk.size()),
          dvPart(whole.dv.size());
      attentionBlockForward(q.data(), whole.k.data(), whole.v.data(),
                            out.data(), lse.data(), sh.B, width, sh.S, runs,
                            sh.heads, sh.kvHeads, sh.d, sh.dv(), documents);
      attentionBlockBackward(
          dout.data(), q.data(), whole.k.data(), whole.v.data(), out.data(),
          lse.data(), dq.data(), dkPart.data(), dvPart.data(), sh.B, width,
          sh.S, runs, sh.heads, sh.kvHeads, sh.d, sh.dv(), documents);
      auto wide = [](const std::vector<float> &x) {
        return std::vector<double>(x.begin(), x.end());
      };
      expectNear(out, wide(rowsOf(whole.out, oWidth)), 1e-5, "out");
      expectNear(dq, wide(rowsOf(whole.dq, qWidth)), 1e-5, "dq");
      // lse is [B, heads, S]: the block's columns of every row.
      std::vector<float> wantLse;
      for (int64_t row = 0; row < sh.B * sh.heads; ++row) {
        std::vector<float> columns(whole.lse.begin() + row * sh.S,
                                   whole.lse.begin() + (row + 1) * sh.S);
        std::vector<float> mine(width);
        for (const SequenceRun &run : runs)
          std::copy_n(columns.begin() + run.whole, run.length,
                      mine.begin() + run.local);
        wantLse.insert(wantLse.end(), mine.begin(), mine.end());
      }
      expectNear(lse, wide(wantLse), 1e-5, "lse");
      for (size_t i = 0; i < dk.size(); ++i)
        dk[i] += dkPart[i];
      for (size_t i = 0; i < dv.size(); ++i)
        dv[i] += dvPart[i];
    }
    std::vector<float> dkSum(dk.begin(), dk.end()), dvSum(dv.begin(), dv.end());
    expectNear(dkSum, std::vector<double>(whole.dk.begin(), whole.dk.end()),
               1e-5, "dk");
    expectNear(dvSum, std::vector<double>(whole.dv.begin(), whole.dv.end()),
               1e-5, "dv");
  }
}

// A chunk of keys entirely after a chunk of queries changes nothing: the
// running output and lse stay as they were (here: none seen yet).
TEST(AttentionTest, AFullyMaskedChunkLeavesTheRunningValues) {
  Shape sh{1, 8, 2, 1, 4};
  auto q = randomVector(sh.qSize(), 81), k = randomVector(sh.kvSize(), 82),
       v = randomVector(sh.vSize(), 83);
  std::vector<float> out(sh.oSize(), 0.5f),
      lse(sh.lseSize(), -std::numeric_limits<float>::infinity());
  attentionChunkForward(q.data(), k.data(), v.data(), out.data(), lse.data(), 1,
                        8, 8, /*queryStart=*/0, /*keyStart=*/8, sh.heads,
                        sh.kvHeads, sh.d);
  for (float l : lse)
    EXPECT_EQ(l, -std::numeric_limits<float>::infinity());
  for (float o : out)
    EXPECT_EQ(o, 0.5f);
}

TEST(AttentionTest, Deterministic) {
  Shape sh{2, 100, 4, 2, 16};
  BackwardCase a(sh), b(sh);
  EXPECT_TRUE(bitwiseEqual(a.out, b.out));
  EXPECT_TRUE(bitwiseEqual(a.lse, b.lse));
  EXPECT_TRUE(bitwiseEqual(a.dq, b.dq));
  EXPECT_TRUE(bitwiseEqual(a.dk, b.dk));
  EXPECT_TRUE(bitwiseEqual(a.dv, b.dv));
}

TEST(AttentionTest, RoughSpeed) {
  // Prints a figure for the report; the bound only catches pathologies.
  Shape sh{1, 1024, 8, 2, 64};
  auto q = randomVector(sh.qSize(), 71), k = randomVector(sh.kvSize(), 72);
  auto v = randomVector(sh.kvSize(), 73), dout = randomVector(sh.qSize(), 74);
  std::vector<float> out(sh.qSize()), lse(sh.lseSize()), dq(sh.qSize()),
      dk(sh.kvSize()), dv(sh.kvSize());
  auto start = std::chrono::steady_clock::now();
  attentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), sh.B,
                   sh.S, sh.heads, sh.kvHeads, sh.d);
  auto mid = std::chrono::steady_clock::now();
  attentionBackward(dout.data(), q.data(), k.data(), v.data(), out.data(),
                    lse.data(), dq.data(), dk.data(), dv.data(), sh.B, sh.S,
                    sh.heads, sh.kvHeads, sh.d);
  auto end = std::chrono::steady_clock::now();
  double fwd = std::chrono::duration<double>(mid - start).count();
  double bwd = std::chrono::duration<double>(end - mid).count();
  std::printf("attention B=1 S=1024 heads=8 kvHeads=2 d=64: forward %.1f ms, "
              "backward %.1f ms\n",
              fwd * 1e3, bwd * 1e3);
  EXPECT_LT(fwd + bwd, 30.0);
}

} // namespace
