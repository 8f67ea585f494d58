//===- ThreadPoolTest.cpp - The kernels' one thread pool ------------------===//
//
// The pool's contract (every task once, one task per worker at a time,
// nested and concurrent regions run serially) and what the kernels promise
// on it: the same bits on every run for a thread count, and, where the
// work is cut into tasks that do not depend on the count (attention, row
// and element loops, AdamW), the same bits for every count.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "../../lib/Runtime/Cpu/ThreadPool.h"
#include "TestUtils.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {


TEST(ThreadPoolTest, EveryTaskRunsOnceWithAWorkerOfItsOwn) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadCount count(threads);
    ASSERT_EQ(numThreads(), threads);
    ASSERT_EQ(detail::availableThreads(), threads);
    constexpr int64_t kTasks = 2000;
    std::vector<std::atomic<int>> runs(kTasks);
    std::vector<std::atomic<bool>> busy(threads);
    std::atomic<int> overlaps{0}, badWorkers{0};
    detail::parallelFor(kTasks, [&](int64_t task, int worker) {
      if (worker < 0 || worker >= threads) {
        ++badWorkers;
        return;
      }
      if (busy[worker].exchange(true))
        ++overlaps;
      ++runs[task];
      busy[worker] = false;
    });
    EXPECT_EQ(badWorkers.load(), 0) << threads << " threads";
    EXPECT_EQ(overlaps.load(), 0) << threads << " threads";
    for (int64_t task = 0; task < kTasks; ++task)
      ASSERT_EQ(runs[task].load(), 1) << "task " << task;
  }
}

TEST(ThreadPoolTest, ARegionInsideATaskRunsSeriallyOnItsThread) {
  ThreadCount count(3);
  std::atomic<int> inner{0}, wrong{0};
  detail::parallelFor(6, [&](int64_t, int) {
    if (detail::availableThreads() != 1)
      ++wrong;
    std::thread::id self = std::this_thread::get_id();
    detail::parallelFor(4, [&](int64_t, int worker) {
      if (worker != 0 || std::this_thread::get_id() != self)
        ++wrong;
      ++inner;
    });
  });
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(inner.load(), 24);
  EXPECT_EQ(detail::availableThreads(), 3);
}

TEST(ThreadPoolTest, TwoCallersAtOnceBothFinishEveryTask) {
  ThreadCount count(2);
  std::atomic<int64_t> done{0};
  auto caller = [&] {
    for (int round = 0; round < 200; ++round)
      detail::parallelFor(16, [&](int64_t, int) { ++done; });
  };
  std::thread other(caller);
  caller();
  other.join();
  EXPECT_EQ(done.load(), 2 * 200 * 16);
}

TEST(ThreadPoolTest, SharesCoverTheRangeOnAlignedBoundaries) {
  for (int64_t n : {0, 1, 15, 16, 17, 100, 1000})
    for (int64_t parts : {1, 2, 3, 7}) {
      int64_t next = 0;
      for (int64_t part = 0; part < parts; ++part) {
        detail::Share share = detail::shareOf(n, parts, part, 16);
        EXPECT_EQ(share.begin, next) << n << " in " << parts;
        EXPECT_LE(share.begin, share.end);
        if (part + 1 < parts) {
          EXPECT_TRUE(share.end % 16 == 0 || share.end == n);
        }
        next = share.end;
      }
      EXPECT_EQ(next, n) << n << " in " << parts;
    }
}

/// One run of every threaded kernel on fixed inputs, outputs concatenated.
struct KernelOutputs {
  std::vector<float> gemm, experts, expertGrads, attention, attentionGrads,
      rows, adamw;
};

KernelOutputs runKernels() {
  KernelOutputs out;
  // A GEMM large enough to be cut.
  int64_t T = 300, K = 128, N = 200;
  auto x = randomVector(T * K, 1), w = randomVector(N * K, 2);
  out.gemm.resize(T * N);
  linearForward(x.data(), w.data(), out.gemm.data(), T, K, N);

  // Experts with routing skewed so that one expert runs alone and the
  // others are tasks, at every thread count above 1.
  int64_t tokens = 256, H = 32, F = 48, E = 6, topK = 2;
  auto ex = randomVector(tokens * H, 3), dy = randomVector(tokens * H, 4);
  auto w1 = randomVector(E * F * H, 5), w3 = randomVector(E * F * H, 6);
  auto w2 = randomVector(E * H * F, 7), gates = randomVector(tokens * topK, 8);
  std::vector<int32_t> ids(tokens * topK);
  for (int64_t t = 0; t < tokens; ++t) {
    ids[t * topK] = 0;
    ids[t * topK + 1] = static_cast<int32_t>(1 + (t * 7) % (E - 1));
  }
  out.experts.resize(tokens * H);
  expertsForward(ex.data(), gates.data(), ids.data(), w1.data(), w3.data(),
                 w2.data(), out.experts.data(), tokens, H, F, E, topK);
  std::vector<float> dx(tokens * H), dgates(tokens * topK), dw1(E * F * H),
      dw3(E * F * H), dw2(E * H * F);
  expertsBackward(dy.data(), ex.data(), gates.data(), ids.data(), w1.data(),
                  w3.data(), w2.data(), dx.data(), dgates.data(), dw1.data(),
                  dw3.data(), dw2.data(), tokens, H, F, E, topK);
  for (const auto *part : {&dx, &dgates, &dw1, &dw3, &dw2})
    out.expertGrads.insert(out.expertGrads.end(), part->begin(), part->end());

  // Attention over 2 x 96 tokens, 4 query heads on 2 key/value heads.
  int64_t B = 2, S = 96, heads = 4, kvHeads = 2, d = 16;
  auto q = randomVector(B * S * heads * d, 9);
  auto k = randomVector(B * S * kvHeads * d, 10);
  auto v = randomVector(B * S * kvHeads * d, 11);
  auto dout = randomVector(B * S * heads * d, 12);
  std::vector<float> o(B * S * heads * d), lse(B * heads * S);
  attentionForward(q.data(), k.data(), v.data(), o.data(), lse.data(), B, S,
                   heads, kvHeads, d);
  out.attention = o;
  out.attention.insert(out.attention.end(), lse.begin(), lse.end());
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  attentionBackward(dout.data(), q.data(), k.data(), v.data(), o.data(),
                    lse.data(), dq.data(), dk.data(), dv.data(), B, S, heads,
                    kvHeads, d);
  for (const auto *part : {&dq, &dk, &dv})
    out.attentionGrads.insert(out.attentionGrads.end(), part->begin(),
                              part->end());

  // Row loops: RMSNorm and its backward, cross-entropy's gradient.
  int64_t rowsT = 700, width = 64;
  auto rx = randomVector(rowsT * width, 13), rw = randomVector(width, 14);
  auto rdy = randomVector(rowsT * width, 15);
  std::vector<float> ry(rowsT * width), rdx(rowsT * width), rdw(width);
  rmsNormForward(rx.data(), rw.data(), ry.data(), rowsT, width, 1e-5f);
  rmsNormBackward(rdy.data(), rx.data(), rw.data(), rdx.data(), rdw.data(),
                  rowsT, width, 1e-5f);
  std::vector<int32_t> targets(rowsT);
  for (int64_t t = 0; t < rowsT; ++t)
    targets[t] = static_cast<int32_t>((t * 13) % width);
  std::vector<float> dlogits(rowsT * width);
  crossEntropyBackward(1.0f, rx.data(), targets.data(), dlogits.data(), rowsT,
                       width);
  float ce = crossEntropyForward(rx.data(), targets.data(), rowsT, width);
  for (const auto *part : {&ry, &rdx, &rdw, &dlogits})
    out.rows.insert(out.rows.end(), part->begin(), part->end());
  out.rows.push_back(ce);

  // AdamW over more elements than one thread's share, clipped.
  int64_t n = 100000;
  auto p = randomVector(n, 16), g = randomVector(n, 17);
  std::vector<float> m(n, 0.01f), s(n, 0.02f);
  adamw(p.data(), g.data(), m.data(), s.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
        0.1f, 3, 0.5f);
  out.adamw = p;
  out.adamw.insert(out.adamw.end(), m.begin(), m.end());
  out.adamw.insert(out.adamw.end(), s.begin(), s.end());
  return out;
}

/// max |a - b| / (1 + |b|).
double largestDifference(const std::vector<float> &a,
                         const std::vector<float> &b) {
  double most = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    most = std::max(most, std::fabs(static_cast<double>(a[i]) - b[i]) /
                              (1.0 + std::fabs(static_cast<double>(b[i]))));
  return most;
}

TEST(ThreadPoolTest, KernelsGiveTheSameBitsOnEveryRun) {
  for (int threads : {1, 2, 3}) {
    ThreadCount count(threads);
    KernelOutputs first = runKernels(), second = runKernels();
    EXPECT_TRUE(bitwiseEqual(first.gemm, second.gemm)) << threads;
    EXPECT_TRUE(bitwiseEqual(first.experts, second.experts)) << threads;
    EXPECT_TRUE(bitwiseEqual(first.expertGrads, second.expertGrads)) << threads;
    EXPECT_TRUE(bitwiseEqual(first.attention, second.attention)) << threads;
    EXPECT_TRUE(bitwiseEqual(first.attentionGrads, second.attentionGrads))
        << threads;
    EXPECT_TRUE(bitwiseEqual(first.rows, second.rows)) << threads;
    EXPECT_TRUE(bitwiseEqual(first.adamw, second.adamw)) << threads;
  }
}

TEST(ThreadPoolTest, OtherThreadCountsChangeOnlyTheCutGemms) {
  KernelOutputs one;
  {
    ThreadCount count(1);
    one = runKernels();
  }
  for (int threads : {2, 3}) {
    ThreadCount count(threads);
    KernelOutputs many = runKernels();
    // Cut into the same tasks at every count: the same bits.
    EXPECT_TRUE(bitwiseEqual(many.attention, one.attention)) << threads;
    EXPECT_TRUE(bitwiseEqual(many.attentionGrads, one.attentionGrads))
        << threads;
    EXPECT_TRUE(bitwiseEqual(many.rows, one.rows)) << threads;
    EXPECT_TRUE(bitwiseEqual(many.adamw, one.adamw)) << threads;
    // GEMMs cut into blocks of rows may round differently (OpenBLAS picks
    // kernels by shape), but compute the same sums.
    EXPECT_LT(largestDifference(many.gemm, one.gemm), 1e-5) << threads;
    EXPECT_LT(largestDifference(many.experts, one.experts), 1e-5) << threads;
    EXPECT_LT(largestDifference(many.expertGrads, one.expertGrads), 1e-5)
        << threads;
  }
}

} // namespace
