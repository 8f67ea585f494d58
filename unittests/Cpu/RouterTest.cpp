//===- RouterTest.cpp - Tests of the top-k routers ------------------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "TestUtils.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace moe::rt::cpu;
using namespace moe::rt::cpu::test;

namespace {

struct RouterOut {
  std::vector<float> probs, weights;
  std::vector<int32_t> indices;
};

RouterOut route(const std::vector<float> &logits, int64_t T, int64_t E,
                int64_t topK, float cf = 0.0f, const RoutingRule &rule = {}) {
  RouterOut r{std::vector<float>(T * E), std::vector<float>(T * topK),
              std::vector<int32_t>(T * topK)};
  routerForward(logits.data(), r.probs.data(), r.weights.data(),
                r.indices.data(), T, E, topK, cf, rule);
  return r;
}

/// Logits whose sorted values are at least 0.5 apart, so that a
/// finite-difference step can never reorder the top-k.
std::vector<float> separatedLogits(int64_t T, int64_t E, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> jitter(-0.1f, 0.1f);
  std::vector<float> logits(T * E);
  std::vector<int> order(E);
  for (int64_t t = 0; t < T; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), gen);
    for (int64_t e = 0; e < E; ++e)
      logits[t * E + e] = 0.7f * order[e] - 1.5f + jitter(gen);
  }
  return logits;
}

/// routerBackward against central differences (of a copy of the logits) of
/// dw . weights (+ dp . probs when dp is given).
void expectRouterGradient(std::vector<float> logits,
                          const std::vector<float> &dw,
                          const std::vector<float> *dp, int64_t T, int64_t E,
                          int64_t K, float cf, const RoutingRule &rule = {}) {
  RouterOut r = route(logits, T, E, K, cf, rule);
  std::vector<float> dlogits(T * E);
  routerBackward(dw.data(), dp ? dp->data() : nullptr, r.probs.data(),
                 dlogits.data(), T, E, K, rule);
  auto loss = [&] {
    RouterOut f = route(logits, T, E, K, cf, rule);
    double l = dotDouble(dw.data(), f.weights.data(), T * K);
    if (dp)
      l += dotDouble(dp->data(), f.probs.data(), T * E);
    return l;
  };
  GradCheckOptions options;
  options.step = 1e-2f;
  options.absTol = 1e-4;
  EXPECT_GRADIENT("dlogits", logits, dlogits, loss, options);
}

TEST(RouterTest, ForwardMatchesNaive) {
  const int64_t T = 9, E = 6, K = 2;
  auto logits = randomVector(T * E, 81, -3.0f, 3.0f);
  RouterOut r = route(logits, T, E, K);
  for (int64_t t = 0; t < T; ++t) {
    double m = *std::max_element(&logits[t * E], &logits[t * E] + E);
    std::vector<double> p(E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e)
      sum += p[e] = std::exp(logits[t * E + e] - m);
    for (int64_t e = 0; e < E; ++e) {
      p[e] /= sum;
      EXPECT_NEAR(r.probs[t * E + e], p[e], 1e-6);
    }
    // Naive top-2 by full sort (stable: ties keep the lower id first).
    std::vector<int> ids(E);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int a, int b) { return p[a] > p[b]; });
    EXPECT_EQ(r.indices[t * K], ids[0]);
    EXPECT_EQ(r.indices[t * K + 1], ids[1]);
    double s = p[ids[0]] + p[ids[1]];
    EXPECT_NEAR(r.weights[t * K], p[ids[0]] / s, 1e-6);
    EXPECT_NEAR(r.weights[t * K + 1], p[ids[1]] / s, 1e-6);
  }
}

TEST(RouterTest, TiesGoToLowerId) {
  const int64_t E = 4, K = 2;
  std::vector<float> logits = {0.0f, 1.0f, 1.0f, 0.5f,  // tie between 1 and 2
                               3.0f, 3.0f, 3.0f, 3.0f,  // all equal
                               0.0f, 2.0f, -1.0f, 2.0f}; // tie between 1 and 3
  RouterOut r = route(logits, 3, E, K);
  EXPECT_EQ(r.indices, (std::vector<int32_t>{1, 2, 0, 1, 1, 3}));
  EXPECT_FLOAT_EQ(r.weights[2], 0.5f);
  EXPECT_FLOAT_EQ(r.weights[3], 0.5f);
}

TEST(RouterTest, CapacityAdmitsSlotMajor) {
  // C = ceil(1.0 * 3 * 2 / 3) = 2. Preferences: t0 (0, 1), t1 (1, 0),
  // t2 (1, 2). First choices fill expert 1 (t1, t2), so t0's second choice
  // (expert 1) is dropped although t0 comes first; token-major admission
  // would instead drop t2's first choice.
  std::vector<float> logits = {2.0f, 1.0f, 0.0f, //
                               1.0f, 2.0f, 0.0f, //
                               0.0f, 2.0f, 1.0f};
  RouterOut r = route(logits, 3, 3, 2, 1.0f);
  EXPECT_EQ(r.indices, (std::vector<int32_t>{0, -1, 1, 0, 1, 2}));
  // A dropped slot keeps its renormalised weight.
  RouterOut unbounded = route(logits, 3, 3, 2);
  EXPECT_EQ(r.weights, unbounded.weights);
  EXPECT_EQ(r.probs, unbounded.probs);
}

TEST(RouterTest, CapacityDropsLaterTokens) {
  // All tokens prefer expert 0; C = ceil(1.0 * 4 * 1 / 2) = 2.
  std::vector<float> logits = {1.0f, 0.0f, 2.0f, 0.0f, 3.0f, 0.0f, 1.0f, 0.5f};
  RouterOut r = route(logits, 4, 2, 1, 1.0f);
  EXPECT_EQ(r.indices, (std::vector<int32_t>{0, 0, -1, -1}));
}

TEST(RouterTest, CapacityRoundsUp) {
  // All tokens prefer expert 0; C = ceil(1.0 * 10 * 1 / 4) = ceil(2.5) = 3.
  const int64_t T = 10, E = 4;
  std::vector<float> logits(T * E, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    logits[t * E] = 1.0f;
  RouterOut r = route(logits, T, E, 1, 1.0f);
  EXPECT_EQ(std::count(r.indices.begin(), r.indices.begin() + 3, 0), 3);
  EXPECT_EQ(std::count(r.indices.begin(), r.indices.end(), -1), 7);
}

TEST(RouterTest, CapacityFactorZeroDropsNothing) {
  const int64_t T = 16, E = 4, K = 2;
  auto logits = randomVector(T * E, 82);
  for (int64_t t = 0; t < T; ++t)
    logits[t * E] += 5.0f; // everyone wants expert 0
  RouterOut r = route(logits, T, E, K, 0.0f);
  EXPECT_EQ(std::count(r.indices.begin(), r.indices.end(), -1), 0);
}

class RouterBackwardTest
    : public ::testing::TestWithParam<std::tuple<bool, float>> {};

TEST_P(RouterBackwardTest, MatchesFiniteDifferences) {
  auto [withAux, cf] = GetParam();
  const int64_t T = 6, E = 5, K = 2;
  auto logits = separatedLogits(T, E, 83);
  auto dw = randomVector(T * K, 84);
  auto dp = randomVector(T * E, 85);
  RouterOut r = route(logits, T, E, K, cf);
  if (cf > 0.0f) {
    ASSERT_GT(std::count(r.indices.begin(), r.indices.end(), -1), 0);
  }
  expectRouterGradient(logits, dw, withAux ? &dp : nullptr, T, E, K, cf);
}

// Without and with the load-balancing dprobs; without and with capacity
// drops (a dropped slot's weight still depends on its expert's probability).
INSTANTIATE_TEST_SUITE_P(Cases, RouterBackwardTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(0.0f, 0.5f)));

TEST(RouterTest, BackwardWithOnlyAuxIsSoftmaxVjp) {
  const int64_t T = 3, E = 4, K = 1;
  auto logits = randomVector(T * E, 86);
  auto dp = randomVector(T * E, 87);
  RouterOut r = route(logits, T, E, K);
  std::vector<float> dw(T * K, 0.0f), dlogits(T * E);
  routerBackward(dw.data(), dp.data(), r.probs.data(), dlogits.data(), T, E,
                 K);
  for (int64_t t = 0; t < T; ++t) {
    double mean = 0.0;
    for (int64_t e = 0; e < E; ++e)
      mean += r.probs[t * E + e] * dp[t * E + e];
    for (int64_t e = 0; e < E; ++e)
      EXPECT_NEAR(dlogits[t * E + e],
                  r.probs[t * E + e] * (dp[t * E + e] - mean), 1e-6);
  }
}

//===----------------------------------------------------------------------===//
// Selection rules other than Mixtral's (Qwen3-MoE, DeepSeek-V3)
//===----------------------------------------------------------------------===//

/// A rule under test, named for the test's output.
struct NamedRule {
  const char *name;
  RoutingRule rule;
  int64_t topK;
};

void PrintTo(const NamedRule &named, std::ostream *os) { *os << named.name; }

/// A bias of distinct values, as DeepSeek-V3's balancing leaves it.
const std::vector<float> kBias = {0.31f,  -0.22f, 0.05f,  0.47f,
                                  -0.38f, 0.13f,  -0.09f, 0.26f};

std::vector<NamedRule> rules() {
  auto make = [](const char *name, bool sigmoid, bool normalize, float scale,
                 int64_t groups, int64_t topGroups, bool bias, int64_t topK) {
    RoutingRule rule;
    rule.sigmoid = sigmoid;
    rule.normalize = normalize;
    rule.scale = scale;
    rule.groups = groups;
    rule.topGroups = topGroups;
    rule.bias = bias ? kBias.data() : nullptr;
    return NamedRule{name, rule, topK};
  };
  return {make("qwen3_unnormalised", false, false, 1.0f, 1, 1, false, 2),
          make("softmax_scaled", false, true, 2.5f, 1, 1, false, 3),
          make("sigmoid", true, true, 1.0f, 1, 1, false, 2),
          make("sigmoid_unnormalised", true, false, 2.5f, 1, 1, true, 2),
          make("deepseek_v3", true, true, 2.5f, 4, 2, true, 3),
          make("softmax_groups", false, true, 1.0f, 2, 1, false, 2)};
}

/// The rule's selection by full sorts, from the kernel's own scores (so a
/// near tie rounds the same way): groups ranked by the sum of their two
/// best scores plus bias, then the experts of the chosen groups.
std::vector<int> naiveSelection(const float *p, int64_t E, int64_t topK,
                                const RoutingRule &rule) {
  std::vector<float> choice(E);
  for (int64_t e = 0; e < E; ++e)
    choice[e] = rule.bias ? p[e] + rule.bias[e] : p[e];
  int64_t size = E / rule.groups;
  auto byChoice = [&](int a, int b) { return choice[a] > choice[b]; };
  std::vector<std::pair<float, int>> groupScores;
  for (int64_t g = 0; g < rule.groups; ++g) {
    std::vector<int> members(size);
    std::iota(members.begin(), members.end(), static_cast<int>(g * size));
    std::stable_sort(members.begin(), members.end(), byChoice);
    groupScores.push_back(
        {choice[members[0]] + choice[members[1 % size]], static_cast<int>(g)});
  }
  std::stable_sort(groupScores.begin(), groupScores.end(),
                   [](auto a, auto b) { return a.first > b.first; });
  std::vector<int> candidates;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t g = 0; g < rule.topGroups; ++g)
      if (groupScores[g].second == e / size)
        candidates.push_back(static_cast<int>(e));
  std::stable_sort(candidates.begin(), candidates.end(), byChoice);
  candidates.resize(topK);
  return candidates;
}

class RoutingRuleTest : public ::testing::TestWithParam<NamedRule> {};

TEST_P(RoutingRuleTest, ForwardMatchesNaive) {
  const NamedRule &named = GetParam();
  const RoutingRule &rule = named.rule;
  const int64_t T = 12, E = 8, K = named.topK;
  auto logits = randomVector(T * E, 88, -3.0f, 3.0f);
  RouterOut r = route(logits, T, E, K, 0.0f, rule);
  for (int64_t t = 0; t < T; ++t) {
    const float *x = &logits[t * E];
    std::vector<double> p(E);
    double m = *std::max_element(x, x + E), sum = 0.0;
    for (int64_t e = 0; e < E; ++e)
      sum += p[e] = rule.sigmoid ? 1.0 / (1.0 + std::exp(-double(x[e])))
                                 : std::exp(x[e] - m);
    for (int64_t e = 0; e < E; ++e) {
      if (!rule.sigmoid)
        p[e] /= sum;
      EXPECT_NEAR(r.probs[t * E + e], p[e], 1e-6) << named.name;
    }
    std::vector<int> ids = naiveSelection(&r.probs[t * E], E, K, rule);
    double selected = 0.0;
    for (int64_t j = 0; j < K; ++j) {
      EXPECT_EQ(r.indices[t * K + j], ids[j]) << named.name << " t=" << t;
      selected += p[ids[j]];
    }
    for (int64_t j = 0; j < K; ++j) {
      double w =
          (rule.normalize ? p[ids[j]] / selected : p[ids[j]]) * rule.scale;
      EXPECT_NEAR(r.weights[t * K + j], w, 2e-6 * rule.scale) << named.name;
    }
  }
}

TEST_P(RoutingRuleTest, BackwardMatchesFiniteDifferences) {
  const NamedRule &named = GetParam();
  const int64_t T = 6, E = 8, K = named.topK;
  auto logits = separatedLogits(T, E, 89);
  auto dw = randomVector(T * K, 90);
  auto dp = randomVector(T * E, 91);
  for (bool withAux : {false, true}) {
    SCOPED_TRACE(std::string(named.name) + (withAux ? " with dprobs" : ""));
    expectRouterGradient(logits, dw, withAux ? &dp : nullptr, T, E, K, 0.0f,
                         named.rule);
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, RoutingRuleTest, ::testing::ValuesIn(rules()),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });

TEST(RoutingRuleTest, GroupsLimitTheCandidates) {
  // Four groups of two. Expert 0 has the best score, but its group's
  // second is the worst; groups 1 (experts 2, 3) and 3 (6, 7) score best.
  const int64_t E = 8, K = 2;
  std::vector<float> logits = {3.0f, -4.0f, 1.5f, 1.4f, 0.0f, 0.1f, 1.0f, 2.5f};
  RoutingRule rule;
  rule.sigmoid = true;
  rule.groups = 4;
  rule.topGroups = 2;
  RouterOut limited = route(logits, 1, E, K, 0.0f, rule);
  EXPECT_EQ(limited.indices, (std::vector<int32_t>{7, 2}));
  RoutingRule plain;
  plain.sigmoid = true;
  EXPECT_EQ(route(logits, 1, E, K, 0.0f, plain).indices,
            (std::vector<int32_t>{0, 7}));
}

TEST(RoutingRuleTest, BiasSteersTheChoiceNotTheWeights) {
  const int64_t E = 4, K = 1;
  std::vector<float> logits = {1.0f, 0.5f, 0.0f, -1.0f};
  std::vector<float> bias = {0.0f, 0.0f, 0.5f, 0.0f};
  RoutingRule rule;
  rule.sigmoid = true;
  rule.normalize = false;
  rule.bias = bias.data();
  RouterOut r = route(logits, 1, E, K, 0.0f, rule);
  // sigmoid(1) = 0.731 < sigmoid(0) + 0.5 = 1.0: expert 2 is chosen, with
  // its unbiased score as its weight.
  EXPECT_EQ(r.indices[0], 2);
  EXPECT_FLOAT_EQ(r.weights[0], 0.5f);
  // The gradient reaches the chosen expert's logit only.
  std::vector<float> dw = {1.0f}, dlogits(E);
  routerBackward(dw.data(), nullptr, r.probs.data(), dlogits.data(), 1, E, K,
                 rule);
  EXPECT_EQ(dlogits, (std::vector<float>{0.0f, 0.0f, 0.25f, 0.0f}));
}

TEST(RoutingRuleTest, SigmoidScoresThatUnderflowGiveZeroWeights) {
  // Every score rounds to 0: HF's 1e-20 keeps the normalised weights 0
  // instead of 0 / 0.
  const int64_t E = 4, K = 2;
  std::vector<float> logits(E, -200.0f);
  RoutingRule rule;
  rule.sigmoid = true;
  RouterOut r = route(logits, 1, E, K, 0.0f, rule);
  EXPECT_EQ(r.weights, (std::vector<float>{0.0f, 0.0f}));
  std::vector<float> dw = {1.0f, -1.0f}, dlogits(E);
  routerBackward(dw.data(), nullptr, r.probs.data(), dlogits.data(), 1, E, K,
                 rule);
  for (float g : dlogits)
    EXPECT_TRUE(std::isfinite(g));
}

//===----------------------------------------------------------------------===//
// Expert load and auxiliary-loss-free balancing
//===----------------------------------------------------------------------===//

TEST(ExpertLoadTest, CountsAdmittedAssignmentsOnly) {
  std::vector<int32_t> ids = {0, 2, 2, -1, 3, 2, 0, -1};
  EXPECT_EQ(expertCounts(ids.data(), ids.size(), 4),
            (std::vector<int64_t>{2, 0, 3, 1}));
  std::vector<float> load = {1.0f, 0.0f, 0.0f, 5.0f};
  addExpertCounts({2, 0, 3, 1}, load.data());
  EXPECT_EQ(load, (std::vector<float>{3.0f, 0.0f, 3.0f, 6.0f}));
}

TEST(ExpertLoadTest, BiasMovesAgainstTheLoadError) {
  // Mean 3: expert 0 under (+rate), 1 at the mean (0), 2 and 3 over (-rate).
  std::vector<float> load = {1.0f, 3.0f, 4.0f, 4.0f};
  std::vector<float> bias = {0.5f, 0.5f, 0.5f, -0.25f};
  expertLoadUpdate(load.data(), bias.data(), 4, 0.125f);
  EXPECT_EQ(bias, (std::vector<float>{0.625f, 0.5f, 0.375f, -0.375f}));
  EXPECT_EQ(load, (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
  // Without a bias the update only clears the counter.
  load = {7.0f, 1.0f};
  expertLoadUpdate(load.data(), nullptr, 2, 0.125f);
  EXPECT_EQ(load, (std::vector<float>{0.0f, 0.0f}));
}

TEST(ExpertLoadTest, StatsOfALayer) {
  std::vector<float> load = {2.0f, 4.0f, 6.0f, 8.0f};
  ExpertLoadStats stats = expertLoadStats(load.data(), 4);
  EXPECT_EQ(stats.min, 2.0);
  EXPECT_EQ(stats.max, 8.0);
  // Population standard deviation sqrt(5) over the mean 5.
  EXPECT_NEAR(stats.cv, std::sqrt(5.0) / 5.0, 1e-12);
  std::vector<float> none(3, 0.0f);
  EXPECT_EQ(expertLoadStats(none.data(), 3).cv, 0.0);
}

} // namespace
