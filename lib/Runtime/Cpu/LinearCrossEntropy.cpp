//===- LinearCrossEntropy.cpp - The LM head fused with cross-entropy ------===//
//
// moe.linear_cross_entropy and its gradient without the [T, V] logits (Cut
// Cross-Entropy, Liger's fused linear cross-entropy): the vocabulary is cut
// into blocks of linearCrossEntropyBlock(T, V) columns, and a block of logits
// x w[v0:v1]^T exists only in one scratch buffer of T * block floats, while
// it is consumed. At T = 4096 and V = 152064 the whole logits would take
// 2.3 GiB; a block takes 8 MiB.
//
// Forward: per block, one GEMM, then per row an online log-sum-exp: a
// running float max m and a double sum s of exp(logit - m), with s rescaled
// by exp(m_old - m_new) when a block raises the max; lse = m + log s. The
// target's logit is read from the block that holds it. With one block this
// is crossEntropySums' arithmetic operation for operation, so the fused loss
// is the unfused one bit for bit.
//
// Backward: per block, the logits GEMM again, g = coef (exp(logit - lse) -
// onehot) in place with crossEntropyBackward's scaledSoftmax, then
// dw[v0:v1] = g^T x (each row of dw written by exactly one block) and
// dx += g w[v0:v1] in block order.
//
// GEMMs go through detail::gemm and row loops through detail::forEachShare
// with each row's math in a fixed order, and the loss is summed in row
// order: the results are bitwise reproducible for a thread count.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"
#include "ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

namespace moe::rt::cpu {

namespace {
/// The block to use: `vocabBlock` clamped to V, or the default when 0.
int64_t blockColumns(int64_t T, int64_t V, int64_t vocabBlock) {
  return vocabBlock > 0 ? std::min(vocabBlock, V)
                        : linearCrossEntropyBlock(T, V);
}

/// The scratch of one block of logits, uninitialised: each block's GEMM
/// writes all of it before it is read, and zeroing it would be one more pass
/// over up to kLinearCrossEntropyBlockBytes per call.
std::unique_ptr<float[]> blockScratch(int64_t T, int64_t block) {
  return std::unique_ptr<float[]>(new float[T * block]);
}

/// logits[T, n] = x w[v0:v0 + n]^T.
void blockLogits(const float *x, const float *w, float *logits, int64_t T,
                 int64_t H, int64_t v0, int64_t n) {
  detail::gemm(false, true, T, n, H, 1.0f, x, H, w + v0 * H, H, 0.0f, logits,
               n);
}
} // namespace

CrossEntropySums linearCrossEntropySums(const float *x, const float *w,
                                        const int32_t *targets, float *lse,
                                        int64_t T, int64_t H, int64_t V,
                                        int64_t vocabBlock) {
  if (T == 0)
    return {};
  if (V == 0) {
    // The log of an empty sum; no target can be counted.
    std::fill(lse, lse + T, -std::numeric_limits<float>::infinity());
    return {};
  }
  int64_t block = blockColumns(T, V, vocabBlock);
  std::unique_ptr<float[]> logits = blockScratch(T, block);
  // Per row: the largest logit so far, the sum of exp(logit - max) over the
  // logits so far, and the target's logit once its block has been seen.
  std::vector<float> runningMax(T);
  std::vector<double> runningSum(T);
  std::vector<float> targetLogit(T);
  for (int64_t v0 = 0; v0 < V; v0 += block) {
    int64_t n = std::min(block, V - v0);
    blockLogits(x, w, logits.get(), T, H, v0, n);
    detail::forEachShare(
        T, detail::rowGrain(n), [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const float *row = logits.get() + t * n;
            float blockMax = *std::max_element(row, row + n);
            float m = blockMax;
            double sum = 0.0;
            if (v0 != 0) {
              m = runningMax[t];
              sum = runningSum[t];
              if (blockMax > m) {
                sum *= std::exp(static_cast<double>(m) - blockMax);
                m = blockMax;
              }
            }
            for (int64_t v = 0; v < n; ++v)
              sum += std::exp(static_cast<double>(row[v]) - m);
            runningMax[t] = m;
            runningSum[t] = sum;
            int32_t target = targets[t];
            if (detail::isCounted(target, V) && target >= v0 && target < v0 + n)
              targetLogit[t] = row[target - v0];
          }
        });
  }
  CrossEntropySums sums;
  for (int64_t t = 0; t < T; ++t) {
    double rowLse =
        static_cast<double>(runningMax[t]) + std::log(runningSum[t]);
    lse[t] = static_cast<float>(rowLse);
    if (!detail::isCounted(targets[t], V))
      continue;
    sums.sum += rowLse - static_cast<double>(targetLogit[t]);
    ++sums.count;
  }
  return sums;
}

void linearCrossEntropyBackward(float dloss, const float *x, const float *w,
                                const int32_t *targets, const float *lse,
                                float *dx, float *dw, int64_t T, int64_t H,
                                int64_t V, int64_t count, int64_t vocabBlock) {
  if (T == 0 || V == 0 || count == 0) {
    std::fill(dx, dx + T * H, 0.0f);
    std::fill(dw, dw + V * H, 0.0f);
    return;
  }
  double coef = static_cast<double>(dloss) / static_cast<double>(count);
  int64_t block = blockColumns(T, V, vocabBlock);
  std::unique_ptr<float[]> scratch = blockScratch(T, block);
  float *g = scratch.get();
  for (int64_t v0 = 0; v0 < V; v0 += block) {
    int64_t n = std::min(block, V - v0);
    blockLogits(x, w, g, T, H, v0, n);
    detail::forEachShare(T, detail::rowGrain(n),
                         [&](int64_t begin, int64_t end) {
                           for (int64_t t = begin; t < end; ++t) {
                             float *row = g + t * n;
                             int32_t target = targets[t];
                             if (!detail::isCounted(target, V)) {
                               std::fill(row, row + n, 0.0f);
                               continue;
                             }
                             detail::scaledSoftmax(row, row, n, lse[t], coef);
                             if (target >= v0 && target < v0 + n)
                               row[target - v0] -= static_cast<float>(coef);
                           }
                         });
    detail::gemm(true, false, n, H, T, 1.0f, g, n, x, H, 0.0f, dw + v0 * H, H);
    detail::gemm(false, false, T, H, n, 1.0f, g, n, w + v0 * H, H,
                 v0 == 0 ? 0.0f : 1.0f, dx, H);
  }
}

} // namespace moe::rt::cpu
