//===- TrainingTest.cpp - executor steps against direct kernel calls ------===//
//
// The executor must compute exactly what the program says: a step of the
// tiny model is recomputed here by calling the kernels by hand, and both the
// tiny and the MoE model must learn a fixed batch.
//
//===----------------------------------------------------------------------===//

#include "LoadProgram.h"

#include "moe/Runtime/Artifact/Reader.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Engine/Executor.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>

namespace moe::rt {
namespace {

using testing::MoeConfig;
using testing::load;
using testing::TinyConfig;

std::vector<float> copyOf(const Executor &executor, const char *name) {
  uint32_t b = *executor.findBuffer(name);
  const float *values = executor.data(b);
  return std::vector<float>(
      values, values + executor.program().buffers[b].numElements());
}

void fillBatch(int64_t count, int64_t vocab, std::vector<int32_t> &tokens,
               std::vector<int32_t> &targets) {
  tokens.resize(count);
  targets.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7 + 2) % vocab);
    targets[i] = static_cast<int32_t>((i * 3 + 1) % vocab);
  }
}

/// The tiny model's step, written out with the kernels.
struct TinyReference {
  TinyConfig c;
  std::vector<float> embed, norm, head;
  std::vector<float> embedM, embedV, normM, normV, headM, headV;

  StepResult step(const std::vector<int32_t> &tokens,
                  const std::vector<int32_t> &targets, int64_t step) {
    int64_t T = c.batch * c.seq, V = c.vocab, H = c.hidden;
    std::vector<float> h(T * H), n(T * H), logits(T * V);
    EXPECT_EQ(
        cpu::embeddingForward(tokens.data(), embed.data(), h.data(), T, V, H),
        -1);
    cpu::rmsNormForward(h.data(), norm.data(), n.data(), T, H, 1e-5f);
    cpu::linearForward(n.data(), head.data(), logits.data(), T, H, V);
    StepResult result;
    result.loss = cpu::crossEntropyForward(logits.data(), targets.data(), T, V);

    std::vector<float> dlogits(T * V), dn(T * H), dhead(V * H), dh(T * H),
        dnorm(H), dembed(V * H);
    cpu::crossEntropyBackward(1.0f, logits.data(), targets.data(),
                              dlogits.data(), T, V);
    cpu::linearBackwardInput(dlogits.data(), head.data(), dn.data(), T, H, V);
    cpu::linearBackwardWeight(dlogits.data(), n.data(), dhead.data(), T, H, V);
    cpu::rmsNormBackward(dn.data(), h.data(), norm.data(), dh.data(),
                         dnorm.data(), T, H, 1e-5f);
    cpu::embeddingBackward(dh.data(), tokens.data(), dembed.data(), T, V, H);

    double squares = cpu::sumOfSquares(dembed.data(), V * H) +
                     cpu::sumOfSquares(dnorm.data(), H) +
                     cpu::sumOfSquares(dhead.data(), V * H);
    result.gradNorm = static_cast<float>(std::sqrt(squares));
    float coef = std::min(1.0f, c.maxNorm / (result.gradNorm + 1e-6f));
    result.lr = cpu::learningRate(step, c.peakLr, c.minLr, c.warmup, c.decay);
    auto update = [&](std::vector<float> &p, std::vector<float> &g,
                      std::vector<float> &m, std::vector<float> &v,
                      float decay) {
      for (float &x : g)
        x *= coef;
      cpu::adamw(p.data(), g.data(), m.data(), v.data(),
                 static_cast<int64_t>(p.size()), result.lr, c.beta1, c.beta2,
                 c.eps, decay, step);
    };
    update(embed, dembed, embedM, embedV, c.weightDecay);
    update(norm, dnorm, normM, normV, 0.0f);
    update(head, dhead, headM, headV, c.weightDecay);
    return result;
  }
};

TEST(TrainingTest, TinyStepsMatchDirectKernelCalls) {
  TinyConfig config;
  config.maxNorm = 0.5f; // small enough that clipping is active
  config.peakLr = 0.1f;
  config.decay = 100;
  std::unique_ptr<Executor> executor = load(testing::makeTinyProgram(config));
  ASSERT_TRUE(executor);
  executor->initialize(99);

  TinyReference reference{config};
  reference.embed = copyOf(*executor, "model.embed_tokens.weight");
  reference.norm = copyOf(*executor, "model.norm.weight");
  reference.head = copyOf(*executor, "lm_head.weight");
  for (auto *state : {&reference.embedM, &reference.embedV})
    state->assign(reference.embed.size(), 0.0f);
  for (auto *state : {&reference.normM, &reference.normV})
    state->assign(reference.norm.size(), 0.0f);
  for (auto *state : {&reference.headM, &reference.headV})
    state->assign(reference.head.size(), 0.0f);

  std::vector<int32_t> tokens, targets;
  fillBatch(executor->tokensPerStep(), config.vocab, tokens, targets);
  float first = 0, last = 0;
  for (int64_t step = 0; step < 12; ++step) {
    SCOPED_TRACE(step);
    absl::StatusOr<StepResult> result =
        executor->runStep(tokens.data(), targets.data(), step);
    ASSERT_TRUE(result.ok()) << result.status();
    StepResult expected = reference.step(tokens, targets, step);
    EXPECT_FLOAT_EQ(result->loss, expected.loss);
    EXPECT_FLOAT_EQ(result->gradNorm, expected.gradNorm);
    EXPECT_FLOAT_EQ(result->lr, expected.lr);
    if (step == 0) {
      first = result->loss;
      EXPECT_NEAR(first, std::log(static_cast<float>(config.vocab)), 0.05f);
      EXPECT_GT(result->gradNorm, config.maxNorm);
    }
    last = result->loss;
  }
  auto expectClose = [&](const char *name, const std::vector<float> &values) {
    std::vector<float> actual = copyOf(*executor, name);
    ASSERT_EQ(actual.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_NEAR(actual[i], values[i], 1e-6f + 1e-5f * std::fabs(values[i]))
          << name << "[" << i << "]";
  };
  expectClose("model.embed_tokens.weight", reference.embed);
  expectClose("model.norm.weight", reference.norm);
  expectClose("lm_head.weight", reference.head);
  expectClose("lm_head.weight.exp_avg", reference.headM);
  expectClose("lm_head.weight.exp_avg_sq", reference.headV);
  EXPECT_LT(last, first - 0.5f);
}

/// The MoE model's loss at initialisation, from the kernels directly.
float moeReferenceLoss(const Executor &executor, const MoeConfig &c,
                       const std::vector<int32_t> &tokens,
                       const std::vector<int32_t> &targets) {
  int64_t B = c.batch, S = c.seq, T = B * S, V = c.vocab, H = c.hidden;
  int64_t d = H / c.heads, Q = c.heads * d, KV = c.kvHeads * d;
  int64_t E = c.experts, F = c.ffn, K = c.topK;
  auto p = [&](const std::string &name) {
    return executor.data(*executor.findBuffer(name));
  };
  const std::string l = "model.layers.0.";
  std::vector<float> x0(T * H), n1(T * H), q(T * Q), k(T * KV), v(T * KV),
      att(T * Q), lse(B * c.heads * S), o(T * H), x1(T * H), n2(T * H),
      rl(T * E), probs(T * E), rw(T * K), ffn(T * H), x2(T * H), nf(T * H),
      logits(T * V);
  std::vector<int32_t> ids(T * K);
  cpu::embeddingForward(tokens.data(), p("model.embed_tokens.weight"),
                        x0.data(), T, V, H);
  cpu::rmsNormForward(x0.data(), p(l + "input_layernorm.weight"), n1.data(), T,
                      H, 1e-5f);
  cpu::linearForward(n1.data(), p(l + "self_attn.q_proj.weight"), q.data(), T,
                     H, Q);
  cpu::linearForward(n1.data(), p(l + "self_attn.k_proj.weight"), k.data(), T,
                     H, KV);
  cpu::linearForward(n1.data(), p(l + "self_attn.v_proj.weight"), v.data(), T,
                     H, KV);
  cpu::ropeForward(q.data(), q.data(), B, S, c.heads, d, 10000.0f);
  cpu::ropeForward(k.data(), k.data(), B, S, c.kvHeads, d, 10000.0f);
  cpu::attentionForward(q.data(), k.data(), v.data(), att.data(), lse.data(), B,
                        S, c.heads, c.kvHeads, d);
  cpu::linearForward(att.data(), p(l + "self_attn.o_proj.weight"), o.data(), T,
                     Q, H);
  cpu::add(x0.data(), o.data(), x1.data(), T * H);
  cpu::rmsNormForward(x1.data(), p(l + "post_attention_layernorm.weight"),
                      n2.data(), T, H, 1e-5f);
  cpu::linearForward(n2.data(), p(l + "block_sparse_moe.gate.weight"),
                     rl.data(), T, H, E);
  cpu::routerForward(rl.data(), probs.data(), rw.data(), ids.data(), T, E, K,
                     c.capacityFactor);
  const std::string x = l + "block_sparse_moe.experts.{e}.";
  cpu::expertsForward(n2.data(), rw.data(), ids.data(), p(x + "w1.weight"),
                      p(x + "w3.weight"), p(x + "w2.weight"), ffn.data(), T, H,
                      F, E, K);
  cpu::add(x1.data(), ffn.data(), x2.data(), T * H);
  cpu::rmsNormForward(x2.data(), p("model.norm.weight"), nf.data(), T, H,
                      1e-5f);
  cpu::linearForward(nf.data(), p("lm_head.weight"), logits.data(), T, H, V);
  double ce = cpu::crossEntropyForward(logits.data(), targets.data(), T, V);
  double aux = cpu::auxLossForward(probs.data(), T, E, K);
  return static_cast<float>(ce + c.auxCoef * aux);
}

void trainMoe(const MoeConfig &config) {
  std::unique_ptr<Executor> executor = load(testing::makeMoeProgram(config));
  ASSERT_TRUE(executor);
  executor->initialize();
  std::vector<int32_t> tokens, targets;
  fillBatch(executor->tokensPerStep(), config.vocab, tokens, targets);
  float expectedFirst = moeReferenceLoss(*executor, config, tokens, targets);

  float first = 0, last = 0;
  for (int64_t step = 0; step < 40; ++step) {
    absl::StatusOr<StepResult> result =
        executor->runStep(tokens.data(), targets.data(), step);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_TRUE(std::isfinite(result->gradNorm));
    if (step == 0) {
      first = result->loss;
      EXPECT_NEAR(first, expectedFirst, 1e-5f * std::fabs(expectedFirst));
    }
    last = result->loss;
  }
  EXPECT_LT(last, 0.5f * first) << "first " << first << ", last " << last;
}

TEST(TrainingTest, MoeLearnsAFixedBatch) { trainMoe(MoeConfig{}); }

TEST(TrainingTest, MoeWithCapacityDropsLearnsAFixedBatch) {
  MoeConfig config;
  config.capacityFactor = 0.5f;
  config.kvHeads = 2;
  trainMoe(config);
}

} // namespace
} // namespace moe::rt
