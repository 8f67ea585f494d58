//===- PlannerTest.cpp - the plan model, collectives and search -----------===//
//
// The analytical step model behind moec --plan against closed forms:
// ring collectives, the 1F1B bubble, sharding of weights and optimizer
// state, memory rejection and the search honouring fixed choices.
//
//===----------------------------------------------------------------------===//
#include "moe/Target/Planner.h"
#include "moe/Runtime/Cuda/Workspace.h"
#include "moe/Target/Collectives.h"

#include "llvm/ADT/STLExtras.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;

namespace {

ClusterSpec testCluster() {
  ClusterSpec cluster;
  cluster.name = "test";
  cluster.nodes = 64;
  cluster.gpusPerNode = 8;
  cluster.gpu.name = "gpu";
  cluster.gpu.computeCapability = 90;
  cluster.gpu.memoryGiB = 80;
  cluster.gpu.hbmGBps = 3000;
  cluster.gpu.bf16Tflops = 1000;
  cluster.gpu.fp8Tflops = 2000;
  cluster.gpu.gemmEfficiency = 0.5;
  cluster.nvlinkGBps = 400;
  cluster.internodeGBps = 50;
  cluster.nvlinkLatencyUs = 0;
  cluster.internodeLatencyUs = 0;
  cluster.nvlinkEfficiency = 1;
  cluster.networkEfficiency = 1;
  return cluster;
}

/// A dense 7B-like model.
ModelShape denseModel() {
  ModelShape m;
  m.name = "dense";
  m.vocab = 32000;
  m.hidden = 4096;
  m.layers = 32;
  m.heads = 32;
  m.kvHeads = 32;
  m.experts = 1;
  m.topK = 1;
  m.ffn = 11008;
  m.denseLayers = 32;
  m.denseFfn = 11008;
  m.seq = 4096;
  return m;
}

/// A MoE model (the dense one with 8 experts top-2).
ModelShape moeModel() {
  ModelShape m = denseModel();
  m.name = "moe";
  m.denseLayers = 0;
  m.experts = 8;
  m.topK = 2;
  return m;
}

TEST(CollectivesTest, RingsWithinAndAcrossNodes) {
  ClusterSpec cluster = testCluster();
  double bytes = 1e9;
  // 8 ranks in one node: 2 (n-1)/n of the bytes over NVLink.
  CollectiveGroup node = stridedGroup(8, 1, 8);
  EXPECT_TRUE(node.withinNode());
  EXPECT_NEAR(allReduceSeconds(cluster, node, bytes), 2 * 7.0 / 8 * 1e9 / 400e9,
              1e-12);
  // One rank per node (stride 8) over 4 nodes: the network, one NIC each.
  CollectiveGroup across = stridedGroup(4, 8, 8);
  EXPECT_EQ(across.perNode, 1);
  EXPECT_NEAR(allReduceSeconds(cluster, across, bytes),
              2 * 3.0 / 4 * 1e9 / 50e9, 1e-12);
  // 16 ranks, 8 per node: within the node, then 8 rings of 1/8 the bytes.
  CollectiveGroup both = stridedGroup(16, 1, 8);
  EXPECT_NEAR(allReduceSeconds(cluster, both, bytes),
              2 * (7.0 / 8 * 1e9 / 400e9 + 1.0 / 2 * 1e9 / 8 / 50e9), 1e-12);
  // An all-gather is half an all-reduce; a group of one costs nothing.
  EXPECT_NEAR(allGatherSeconds(cluster, both, bytes),
              allReduceSeconds(cluster, both, bytes) / 2, 1e-12);
  EXPECT_EQ(allReduceSeconds(cluster, stridedGroup(1, 1, 8), bytes), 0);
}

TEST(PlannerTest, ModelFlopsAreSixTimesTheWeightsPlusAttention) {
  ModelShape m = denseModel();
  double h = m.hidden;
  double nonEmbedding = m.layers * (4 * h * h + 3 * h * m.ffn);
  // 6 N (weights other than the embedding table, with the head) plus the
  // causal attention's 6 L s h.
  double expected = 6 * (nonEmbedding + h * m.vocab) + 6.0 * m.layers * m.seq * h;
  EXPECT_NEAR(m.modelFlopsPerToken() / expected, 1.0, 1e-9);
  EXPECT_NEAR(m.totalParams(), nonEmbedding + 2 * h * m.vocab +
                                   m.layers * 2 * h + h,
              1.0);
}

// DeepSeek's shared experts are a dense MLP every token of a MoE layer
// runs: 3 h F_shared weights per layer, counted active, and 6 of their
// FLOPs per weight and token.
TEST(PlannerTest, SharedExpertsAreDenseWeightsEveryTokenUses) {
  ModelShape plain = moeModel();
  ModelShape shared = plain;
  shared.sharedFfn = 2 * plain.ffn;
  double weights = shared.moeLayers() * 3.0 * shared.hidden * shared.sharedFfn;
  EXPECT_NEAR(shared.denseParams() - plain.denseParams(), weights, 1.0);
  EXPECT_EQ(shared.expertParams(), plain.expertParams());
  EXPECT_NEAR(shared.modelFlopsPerToken() - plain.modelFlopsPerToken(),
              6.0 * weights, 1.0);
}

// Qwen3's head_dim sets the attention widths, whatever hidden / heads is:
// q and o are h x heads * head_dim, k and v h x kv_heads * head_dim.
TEST(PlannerTest, HeadDimSetsTheAttentionWidths) {
  ModelShape plain = denseModel();
  ModelShape wide = plain;
  wide.headDim = 2 * plain.hidden / plain.heads;
  double h = plain.hidden;
  // Twice the q, k, v and o widths: twice their weights.
  double extra = plain.layers * h * (2 * h + 2 * h);
  EXPECT_NEAR(wide.denseParams() - plain.denseParams(), extra, 1.0);
  // Their FLOPs, and twice the causal scores (6 L s h more).
  EXPECT_NEAR(wide.modelFlopsPerToken() - plain.modelFlopsPerToken(),
              6 * extra + 6.0 * plain.layers * plain.seq * h, 1.0);
  // Unset, it is hidden / heads.
  EXPECT_EQ(plain.queryWidth(), h);
}

// Qwen3's QK-norms: two weights of the head dimension per layer, nothing
// the FLOP count sees (norms are not matmuls).
TEST(PlannerTest, QkNormAddsTwoHeadWeightsPerLayer) {
  ModelShape plain = denseModel();
  ModelShape normed = plain;
  normed.qkNorm = true;
  double headDim = static_cast<double>(plain.hidden) / plain.heads;
  EXPECT_NEAR(normed.denseParams() - plain.denseParams(),
              plain.layers * 2 * headDim, 1e-6);
  EXPECT_EQ(normed.modelFlopsPerToken(), plain.modelFlopsPerToken());
}

// Tied embeddings: one vocab x hidden table for the lookup and the head
// (the head's FLOPs stay).
TEST(PlannerTest, TiedEmbeddingsCountTheTableOnce) {
  ModelShape plain = denseModel();
  ModelShape tied = plain;
  tied.tiedEmbeddings = true;
  EXPECT_NEAR(plain.denseParams() - tied.denseParams(),
              static_cast<double>(plain.vocab) * plain.hidden, 1e-6);
  EXPECT_EQ(tied.modelFlopsPerToken(), plain.modelFlopsPerToken());
}

// moe-run on a GPU holds its experts' scratch beside the plan's memory
// (moe/Runtime/Cuda/Workspace.h): the planner counts it where another
// software gets a flat GiB, with twice a balanced share of the group's
// slots arriving.
TEST(PlannerTest, MoeRunCountsTheExpertsScratch) {
  ModelShape m = moeModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.dp = 8;
  plan.ep = 4;
  plan.microbatchSize = 1;
  ASSERT_FALSE(checkPlan(m, plan, 8));
  SoftwareTraits other;
  other.moeRun = false;
  SoftwareTraits moeRun;
  PlanCost flat = evaluatePlan(m, plan, cluster, 8, other);
  PlanCost counted = evaluatePlan(m, plan, cluster, 8, moeRun);
  ::moe::rt::cuda::ExpertsScratchShape experts;
  experts.tokens = m.seq;
  experts.topK = m.topK;
  experts.hidden = m.hidden;
  experts.ffn = m.ffn;
  experts.experts = m.experts / plan.ep;
  experts.backward = true;
  experts.bf16 = moeRun.activationBytes < 4;
  experts.groupSize = 2;
  double scratch = ::moe::rt::cuda::kGemmWorkspaceBytes +
                   ::moe::rt::cuda::expertsWorkspaceBytes(experts);
  ASSERT_GT(scratch, 1024.0 * 1024 * 1024);
  EXPECT_EQ(flat.workspaceMemory, 1024.0 * 1024 * 1024);
  EXPECT_NEAR(counted.workspaceMemory, scratch, 1.0);
}

TEST(PlannerTest, OneFOneBBubbleMatchesTheClosedForm) {
  ModelShape m = denseModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.pp = 4;
  plan.dp = 1;
  plan.microbatchSize = 1;
  int64_t batch = 8;
  ASSERT_FALSE(checkPlan(m, plan, batch));
  SoftwareTraits sw;
  PlanCost cost = evaluatePlan(m, plan, cluster, batch, sw);
  EXPECT_EQ(cost.microbatches, 8);
  // 1F1B with equal stages idles p - 1 passes of forward and backward.
  double pass = cost.forwardSeconds + cost.backwardSeconds;
  EXPECT_NEAR(cost.bubbleSeconds / pass, 3.0, 1e-6);
  // Interleaving over 2 chunks halves it.
  plan.virtualStages = 2;
  plan.schedule = ::moe::pipeline::ScheduleKind::Interleaved1F1B;
  ASSERT_FALSE(checkPlan(m, plan, batch));
  PlanCost interleaved = evaluatePlan(m, plan, cluster, batch, sw);
  EXPECT_LT(interleaved.bubbleSeconds, cost.bubbleSeconds * 0.6);
}

TEST(PlannerTest, ShardingDividesWeightsAndState) {
  ModelShape m = denseModel();
  ClusterSpec cluster = testCluster();
  SoftwareTraits sw;
  ParallelPlan replicated;
  replicated.dp = 8;
  replicated.microbatchSize = 1;
  ParallelPlan sharded = replicated;
  sharded.fsdp = true;
  PlanCost a = evaluatePlan(m, replicated, cluster, 8, sw);
  PlanCost b = evaluatePlan(m, sharded, cluster, 8, sw);
  EXPECT_NEAR(b.optimizerMemory * 8, a.optimizerMemory, a.optimizerMemory * 1e-9);
  EXPECT_NEAR(a.optimizerMemory, m.totalParams() * sw.optimizerBytes,
              m.totalParams() * sw.optimizerBytes * 1e-9);
  // Tensor parallelism divides the weights of every layer.
  ParallelPlan tensor = replicated;
  tensor.tp = 8;
  tensor.dp = 1;
  PlanCost c = evaluatePlan(m, tensor, cluster, 1, sw);
  EXPECT_NEAR(c.weightMemory * 8, a.weightMemory, a.weightMemory * 1e-9);
  EXPECT_GT(c.commSeconds.at("tensor-parallel all-reduce"), 0);
}

TEST(PlannerTest, ChunkedExpertExchangeHidesBehindTheExperts) {
  ModelShape m = moeModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.dp = 16;
  plan.ep = 8;
  plan.microbatchSize = 1;
  SoftwareTraits whole;
  whole.chunkedExpertExchange = false;
  SoftwareTraits chunked;
  PlanCost a = evaluatePlan(m, plan, cluster, 16, whole);
  PlanCost b = evaluatePlan(m, plan, cluster, 16, chunked);
  EXPECT_EQ(a.expertChunks, 1);
  EXPECT_GT(b.expertChunks, 1);
  EXPECT_LT(b.stepSeconds, a.stepSeconds);
  // The exchange itself costs the same; less of it shows.
  EXPECT_NEAR(a.commSeconds.at("expert all-to-all"),
              b.commSeconds.at("expert all-to-all"),
              a.commSeconds.at("expert all-to-all") * 1e-9);
  EXPECT_LT(b.exposedCommSeconds, a.exposedCommSeconds);
}

TEST(PlannerTest, ChecksDivisibility) {
  ModelShape m = denseModel();
  ParallelPlan plan;
  plan.tp = 3;
  EXPECT_TRUE(checkPlan(m, plan, 8).has_value());
  plan.tp = 1;
  plan.dp = 3;
  EXPECT_TRUE(checkPlan(m, plan, 8).has_value());
  plan.dp = 1;
  plan.pp = 64;
  EXPECT_TRUE(checkPlan(m, plan, 128).has_value());
}

// Context parallelism: cp ranks each hold a load-balanced block of the
// sequence, so a GPU's activations and compute shrink cp-fold (attention's
// too: each block sees half the keys on average), for the keys' and
// values' exchange, which a ring hides behind attention. Gradients are
// summed over cp as over dp.
TEST(PlannerTest, ContextParallelismSplitsTheSequence) {
  ModelShape m = denseModel();
  m.seq = 65536;
  ClusterSpec cluster = testCluster();
  SoftwareTraits gathered;
  SoftwareTraits ring = gathered;
  ring.overlapContextParallel = true;
  ParallelPlan whole;
  whole.tp = 8;
  whole.remat = Remat::Full;
  ParallelPlan split = whole;
  split.cp = 4;
  ASSERT_FALSE(checkPlan(m, whole, 1));
  ASSERT_FALSE(checkPlan(m, split, 1));
  EXPECT_EQ(split.gpus(), 32);
  EXPECT_EQ(split.meshSpec(), "dp=1,cp=4,tp=8");
  PlanCost a = evaluatePlan(m, whole, cluster, 1, gathered);
  PlanCost b = evaluatePlan(m, split, cluster, 1, gathered);
  PlanCost c = evaluatePlan(m, split, cluster, 1, ring);
  EXPECT_NEAR(b.activationMemory * 4, a.activationMemory,
              a.activationMemory * 1e-9);
  EXPECT_NEAR(b.computeSeconds * 4, a.computeSeconds, a.computeSeconds * 1e-6);
  EXPECT_EQ(a.commSeconds.count("context-parallel K/V"), 0u);
  EXPECT_GT(b.commSeconds.at("context-parallel K/V"), 0);
  EXPECT_GT(b.commSeconds.at("data-parallel all-reduce"), 0);
  // The ring moves the same bytes; less of them shows.
  EXPECT_NEAR(c.commSeconds.at("context-parallel K/V"),
              b.commSeconds.at("context-parallel K/V"), 1e-12);
  EXPECT_LT(c.exposedCommSeconds, b.exposedCommSeconds);
  // 2 cp chunks must divide the sequence, tp each rank's pair.
  split.cp = 3;
  EXPECT_TRUE(checkPlan(m, split, 1).has_value());
  m.seq = 48;
  split.cp = 4;
  EXPECT_TRUE(checkPlan(m, split, 1).has_value());
}

TEST(PlannerTest, SearchKeepsFixedChoicesAndRejectsWhatDoesNotFit) {
  ModelShape m = denseModel();
  ClusterSpec cluster = testCluster();
  SoftwareTraits sw;
  PlanConstraints fixed;
  fixed.tp = 2;
  fixed.pp = 2;
  PlanSearchResult result = searchPlans(m, cluster, 16, 64, fixed, sw, 3);
  ASSERT_FALSE(result.best.empty());
  for (const PlanCost &cost : result.best) {
    EXPECT_EQ(cost.plan.tp, 2);
    EXPECT_EQ(cost.plan.pp, 2);
    EXPECT_TRUE(cost.fits);
  }
  for (size_t i = 1; i < result.best.size(); ++i)
    EXPECT_LE(result.best[i - 1].stepSeconds,
              result.best[i].stepSeconds * 1.001);
  // A GPU of 1 GiB holds no plan of a 7B model on 2 GPUs.
  cluster.gpu.memoryGiB = 1;
  PlanSearchResult none = searchPlans(m, cluster, 2, 8, {}, sw, 3);
  EXPECT_TRUE(none.best.empty());
  EXPECT_EQ(none.rejectedMemory, none.considered);
  EXPECT_GT(none.considered, 0);
}

// moec --plan for moe-run: every plan is one the backend of the GPU's
// target runs, and the cost model leaves out overlap it does not do.
TEST(PlannerTest, SearchProposesOnlyWhatTheBackendRuns) {
  ModelShape m = moeModel();
  ClusterSpec cluster = testCluster();
  SoftwareTraits sw;
  PlanConstraints anything;
  PlanSearchResult free = searchPlans(m, cluster, 64, 256, anything, sw, 500);
  // What a backend lacks is never proposed: here the h100 record without
  // chunked expert exchanges (as the cuda backend was).
  auto unrunnable = [](const PlanCost &cost) { return cost.expertChunks > 1; };
  // Without a backend (another software's run) chunks win, and so they do
  // on the cuda backend, which runs them.
  EXPECT_TRUE(llvm::any_of(free.best, unrunnable));
  PlanConstraints cuda;
  cuda.backend = ::moe::caps::targetCapabilities("h100");
  EXPECT_TRUE(llvm::any_of(searchPlans(m, cluster, 64, 256, cuda, sw, 500).best,
                           unrunnable));
  ::moe::caps::Capabilities noChunks = *::moe::caps::targetCapabilities("h100");
  noChunks.expertChunks = false;
  cuda.backend = &noChunks;
  PlanSearchResult runnable = searchPlans(m, cluster, 64, 256, cuda, sw, 500);
  ASSERT_FALSE(runnable.best.empty());
  EXPECT_EQ(runnable.backend, cuda.backend);
  for (const PlanCost &cost : runnable.best) {
    SCOPED_TRACE(cost.plan.describe());
    EXPECT_FALSE(unrunnable(cost));
    EXPECT_FALSE(checkRunnable(m, cost.plan, 256, cluster.gpu, *cuda.backend));
  }
  // The cuda backend runs pipelines: some of the best plans have stages.
  EXPECT_TRUE(llvm::any_of(runnable.best,
                           [](const PlanCost &c) { return c.plan.pp > 1; }));
  // FP8 on Hopper is the GEMMs' (the dispatch stays in full precision).
  EXPECT_TRUE(llvm::any_of(runnable.best,
                           [](const PlanCost &c) { return c.plan.fp8; }));
  // On an A100, FP8 is the token dispatch alone, which only expert
  // parallelism has.
  cuda.backend = ::moe::caps::targetCapabilities("a100");
  cluster.gpu.fp8Tflops = 0;
  for (const PlanCost &cost :
       searchPlans(m, cluster, 64, 256, cuda, sw, 500).best)
    EXPECT_TRUE(!cost.plan.fp8 || cost.plan.ep > 1) << cost.plan.describe();
  // A fixed choice the backend lacks is considered, and refused by name
  // (a backend without pipeline stages, as the cuda backend was).
  ::moe::caps::Capabilities noStages = *::moe::caps::targetCapabilities("a100");
  noStages.pipelineStages = false;
  cuda.backend = &noStages;
  cuda.pp = 2;
  PlanSearchResult fixed = searchPlans(m, cluster, 64, 256, cuda, sw, 5);
  EXPECT_TRUE(fixed.best.empty());
  EXPECT_GT(fixed.rejectedBackend, 0);
  EXPECT_EQ(fixed.rejectedBackend, fixed.considered);
  EXPECT_EQ(fixed.backendReason,
            "the cuda backend on a100 lacks pipeline_stages (pp=2 vpp=1)");
}

TEST(PlannerTest, ChecksWhatTheBackendRuns) {
  ModelShape m = moeModel();
  GpuSpec hopper = testCluster().gpu;
  // The h100 record without microbatches (as the cuda backend was), so
  // that refusing them is checked.
  ::moe::caps::Capabilities h100 = *::moe::caps::targetCapabilities("h100");
  h100.microbatches = false;
  ParallelPlan plan;
  plan.dp = 8;
  plan.ep = 8;
  plan.microbatchSize = 2;
  EXPECT_EQ(checkRunnable(m, plan, 16, hopper, h100), std::nullopt);
  EXPECT_EQ(checkRunnable(m, plan, 32, hopper, h100),
            "the cuda backend on h100 lacks microbatches (2 microbatches of 2)");
  plan.fp8 = true;
  m.ffn = 11000;
  EXPECT_EQ(checkRunnable(m, plan, 16, hopper, h100),
            "the cuda backend on h100 lacks fp8_gemm_alignment (fp8 GEMMs of "
            "hidden 4096 and ffn 11000 per rank, not multiples of 16)");
  EXPECT_EQ(
      checkRunnable(m, plan, 16, hopper, *::moe::caps::targetCapabilities("cpu")),
      std::nullopt);
  EXPECT_EQ(fp8RecipeOf(h100), "tensorwise");
  EXPECT_EQ(fp8RecipeOf(*::moe::caps::targetCapabilities("cpu")), "blockwise");
  EXPECT_EQ(fp8RecipeOf(*::moe::caps::targetCapabilities("a100")), "");
  SoftwareTraits limited = limitToBackend(SoftwareTraits(), h100);
  EXPECT_TRUE(limited.chunkedExpertExchange);
  ::moe::caps::Capabilities noChunks = h100;
  noChunks.expertChunks = false;
  EXPECT_FALSE(
      limitToBackend(SoftwareTraits(), noChunks).chunkedExpertExchange);
  EXPECT_TRUE(limited.fp8Dispatch);
  EXPECT_TRUE(limited.overlapDataParallel);
}

TEST(PlannerTest, ParsesConstraintsAndSoftware) {
  std::string error;
  FailureOr<PlanConstraints> c =
      parsePlanConstraints("tp=8, pp=4,vpp=2,remat=full,fsdp=1", error);
  ASSERT_TRUE(succeeded(c));
  EXPECT_EQ(*c->tp, 8);
  EXPECT_EQ(*c->virtualStages, 2);
  EXPECT_EQ(*c->remat, Remat::Full);
  EXPECT_TRUE(*c->fsdp);
  EXPECT_TRUE(failed(parsePlanConstraints("tp=x", error)));
  EXPECT_EQ(error, "bad value in 'tp=x'");
  FailureOr<SoftwareTraits> sw = parseSoftwareTraits(
      "attention=unfused,weight-bytes=2,runtime=other", error);
  ASSERT_TRUE(succeeded(sw));
  EXPECT_FALSE(sw->fusedAttention());
  EXPECT_EQ(sw->weightBytes, 2);
  EXPECT_FALSE(sw->precision);
  sw = parseSoftwareTraits(
      "runtime=other,attention=flash3,imbalance=1.25,pp-overlap=1", error);
  ASSERT_TRUE(succeeded(sw));
  EXPECT_EQ(sw->attentionKernel, "flash3");
  EXPECT_EQ(sw->expertImbalance, 1.25);
  EXPECT_TRUE(sw->overlapPipeline);
  sw = parseSoftwareTraits(
      "runtime=other,ep-overlap=batch,fp8-dispatch=0,dispatcher=deepep", error);
  ASSERT_TRUE(succeeded(sw));
  EXPECT_TRUE(sw->batchLevelExpertOverlap);
  EXPECT_FALSE(sw->fp8Dispatch);
  EXPECT_TRUE(sw->dedupedDispatch);
  EXPECT_TRUE(
      failed(parseSoftwareTraits("runtime=other,imbalance=0.5", error)));
  EXPECT_EQ(error, "bad value in 'imbalance=0.5'");
  c = parsePlanConstraints("etp=1,ep=8,zero1=1", error);
  ASSERT_TRUE(succeeded(c));
  EXPECT_EQ(*c->etp, 1);
  EXPECT_TRUE(*c->zero1);
  EXPECT_TRUE(failed(parseSoftwareTraits("weight-bytes=0", error)));
  // moe-run's bytes are the compiled precision's.
  EXPECT_TRUE(failed(parseSoftwareTraits("weight-bytes=2", error)));
  EXPECT_EQ(error, "weight-bytes describes another software's run "
                   "(runtime=other); moe-run's bytes are the compiled "
                   "precision's (--precision, --grad-reduce-dtype)");
  sw = parseSoftwareTraits("attention=unfused", error);
  ASSERT_TRUE(succeeded(sw));
  EXPECT_TRUE(sw->moeRun);
  sw = parseSoftwareTraits("runtime=other", error);
  ASSERT_TRUE(succeeded(sw));
  EXPECT_FALSE(sw->moeRun);
  EXPECT_TRUE(failed(parseSoftwareTraits("runtime=megatron", error)));
}

TEST(PlannerTest, BytesComeFromThePrecision) {
  PrecisionRecipe fp32, bf16, bf16Reduce;
  bf16.compute = Precision::bf16;
  bf16Reduce.compute = bf16Reduce.gradReduce = Precision::bf16;
  SoftwareTraits a = withPrecision(SoftwareTraits(), fp32);
  // fp32 is what the planner assumed before mixed precision.
  EXPECT_EQ(a.weightBytes, 4);
  EXPECT_EQ(a.optimizerBytes, 8);
  EXPECT_EQ(a.gradientBytes, 4);
  EXPECT_EQ(a.activationBytes, 4);
  EXPECT_EQ(a.optimizerStreamBytes(), 28);
  SoftwareTraits b = withPrecision(SoftwareTraits(), bf16);
  EXPECT_EQ(b.weightBytes, 2);      // the working copy
  EXPECT_EQ(b.optimizerBytes, 12);  // master and moments
  EXPECT_EQ(b.gradientBytes, 4);
  EXPECT_EQ(b.activationBytes, 2);
  EXPECT_EQ(b.weightBytes + b.optimizerBytes + b.gradientBytes,
            bf16.bytesPerParameter());
  // Master and moments read and written, the gradient read, the working
  // copy written.
  EXPECT_EQ(b.optimizerStreamBytes(), 2 * 4 + 2 * 8 + 4 + 2);
  EXPECT_EQ(withPrecision(SoftwareTraits(), bf16Reduce).gradientBytes, 2);
  EXPECT_EQ(describeBytes(b),
            "bf16, fp32 gradient reductions: per parameter 4 master + 8 "
            "moments + 2 working copy + 4 gradient = 18 bytes; activations "
            "and messages 2 bytes per element");

  // Half the activation bytes: half the kept activations, messages and
  // weights the GEMMs read; more optimizer state.
  ModelShape m = moeModel();
  ParallelPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.ep = 4;
  ClusterSpec cluster = testCluster();
  ASSERT_EQ(checkPlan(m, plan, 16), std::nullopt);
  PlanCost full = evaluatePlan(m, plan, cluster, 16, a);
  PlanCost mixed = evaluatePlan(m, plan, cluster, 16, b);
  EXPECT_DOUBLE_EQ(mixed.weightMemory, full.weightMemory / 2);
  EXPECT_DOUBLE_EQ(mixed.optimizerMemory, full.optimizerMemory * 1.5);
  EXPECT_DOUBLE_EQ(mixed.activationMemory, full.activationMemory / 2);
  EXPECT_LT(mixed.commSeconds.at("expert all-to-all"),
            full.commSeconds.at("expert all-to-all"));
  EXPECT_LT(mixed.stepSeconds, full.stepSeconds);
}

TEST(PlannerTest, RefusesAPrecisionTheBackendDoesNotHold) {
  PrecisionRecipe bf16;
  bf16.compute = Precision::bf16;
  ::moe::caps::Capabilities record = *::moe::caps::targetCapabilities("a100");
  // The records list bf16, so mixed precision runs where they are.
  EXPECT_EQ(checkPrecisionRunnable(bf16, record), std::nullopt);
  record.dtypes &= ~::moe::caps::dtypeBit(::moe::rt::DType::BF16);
  EXPECT_EQ(checkPrecisionRunnable(bf16, record),
            "the cuda backend on a100 lacks dtypes (bf16, for "
            "--precision=bf16)");
  EXPECT_EQ(checkPrecisionRunnable(PrecisionRecipe(), record), std::nullopt);
}

} // namespace

// Overlapped communication slows the compute it hides behind: contention
// lengthens a step whose gradient all-reduce runs beside the backward.
TEST(PlannerTest, OverlappedCommunicationContendsWithCompute) {
  ModelShape m = denseModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.dp = 8;
  plan.microbatchSize = 1;
  SoftwareTraits sw;
  sw.moeRun = false;
  cluster.nvlinkContention = 0;
  PlanCost free = evaluatePlan(m, plan, cluster, 8, sw);
  cluster.nvlinkContention = 0.5;
  PlanCost contended = evaluatePlan(m, plan, cluster, 8, sw);
  double reduce = free.commSeconds.at("data-parallel all-reduce");
  ASSERT_GT(reduce, 0);
  // Wholly hidden behind the backward: half its seconds show.
  EXPECT_NEAR(contended.stepSeconds - free.stepSeconds, 0.5 * reduce,
              1e-9 * free.stepSeconds);
  EXPECT_NEAR(overlapped(2.0, 1.0, 0.5), 1.0 + 0.5, 1e-12);
  EXPECT_NEAR(overlapped(1.0, 2.0, 0.5), 0.5, 1e-12);
}

// ZeRO-1 shards the optimizer state over the data ranks and keeps the
// weights and gradients whole; FSDP stores the non-expert weights over all
// data ranks (fsdp x ep), the experts over their dp / ep replicas.
TEST(PlannerTest, ZeroOneAndFsdpShardWhatTheyShard) {
  ModelShape m = moeModel();
  ClusterSpec cluster = testCluster();
  SoftwareTraits sw;
  sw.moeRun = false;
  ParallelPlan plain;
  plain.dp = 8;
  plain.ep = 4;
  plain.microbatchSize = 1;
  ParallelPlan zero1 = plain;
  zero1.zero1 = true;
  ParallelPlan fsdp = plain;
  fsdp.fsdp = true;
  ASSERT_FALSE(checkPlan(m, zero1, 8));
  ASSERT_FALSE(checkPlan(m, fsdp, 8));
  PlanCost a = evaluatePlan(m, plain, cluster, 8, sw);
  PlanCost b = evaluatePlan(m, zero1, cluster, 8, sw);
  PlanCost c = evaluatePlan(m, fsdp, cluster, 8, sw);
  double dense = m.denseParams(), experts = m.expertParams() / plain.ep;
  EXPECT_NEAR(a.optimizerMemory, (dense + experts) * sw.optimizerBytes, 1);
  EXPECT_NEAR(b.optimizerMemory, (dense / 8 + experts / 2) * sw.optimizerBytes,
              1);
  EXPECT_EQ(b.weightMemory, a.weightMemory);
  EXPECT_NEAR(c.optimizerMemory, (dense / 8 + experts / 2) * sw.optimizerBytes,
              1);
  EXPECT_TRUE(b.commSeconds.count("zero-1 reduce-scatter"));
  EXPECT_TRUE(checkPlan(
      m,
      [&] {
        ParallelPlan both = fsdp;
        both.zero1 = true;
        return both;
      }(),
      8));
}

// moec's ZeRO-1 (--zero1) shards the state over dp alone (cp holds whole
// copies) and gathers the updated weights inside moe-run's optimizer, where
// nothing hides them; another software prefetches them behind the first
// forward.
TEST(PlannerTest, MoeRunGathersZeroOnesWeightsInItsOptimizer) {
  ModelShape m = denseModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.dp = 4;
  plan.cp = 2;
  plan.zero1 = true;
  plan.microbatchSize = 1;
  ASSERT_FALSE(checkPlan(m, plan, 8));
  ASSERT_FALSE(checkCompilable(plan));
  SoftwareTraits other;
  other.moeRun = false;
  SoftwareTraits moeRun = other;
  moeRun.moeRun = true;
  PlanCost a = evaluatePlan(m, plan, cluster, 8, other);
  PlanCost b = evaluatePlan(m, plan, cluster, 8, moeRun);
  EXPECT_NEAR(b.optimizerMemory, 2 * a.optimizerMemory,
              1e-9 * a.optimizerMemory);
  double gather = b.commSeconds.at("zero-1 all-gather");
  EXPECT_GE(b.exposedCommSeconds, gather);
  EXPECT_GT(b.exposedCommSeconds, a.exposedCommSeconds);
  plan.fsdp = true;
  EXPECT_TRUE(checkCompilable(plan));
}

// Megatron's MoE parallel folding puts an ep group on consecutive ranks:
// with tp 8 on 8-GPU nodes, moec's placement strides ep across nodes, the
// folded one (etp 1) keeps it inside one.
TEST(PlannerTest, FoldedExpertsExchangeInsideANode) {
  ModelShape m = moeModel();
  ClusterSpec cluster = testCluster();
  SoftwareTraits sw;
  sw.moeRun = false;
  sw.chunkedExpertExchange = false;
  ParallelPlan strided;
  strided.tp = 8;
  strided.dp = 8;
  strided.ep = 8;
  strided.microbatchSize = 1;
  ParallelPlan folded = strided;
  folded.expertsFolded = true;
  folded.etp = 1;
  ASSERT_FALSE(checkPlan(m, strided, 8));
  ASSERT_FALSE(checkPlan(m, folded, 8));
  EXPECT_EQ(strided.expertStride(), 8);
  EXPECT_EQ(folded.expertStride(), 1);
  PlanCost a = evaluatePlan(m, strided, cluster, 8, sw);
  PlanCost b = evaluatePlan(m, folded, cluster, 8, sw);
  EXPECT_LT(b.commSeconds.at("expert all-to-all"),
            a.commSeconds.at("expert all-to-all") / 2);
  // Folded, ep may exceed dp: 8 ranks of tp x dp = 64 hold the experts.
  ParallelPlan wide = folded;
  wide.dp = 1;
  EXPECT_FALSE(checkPlan(m, wide, 8));
  ParallelPlan stridedWide = strided;
  stridedWide.dp = 1;
  EXPECT_TRUE(checkPlan(m, stridedWide, 8));
}

// DeepEP's dispatch sends a token across the network once per other node
// it is bound for: with top-8 over 4 nodes, 4 (1 - (3/4)^8) / 8 of the
// copies the plain all-to-all sends there.
TEST(CollectivesTest, ADedupedDispatchCrossesTheNetworkOncePerNode) {
  ClusterSpec cluster = testCluster();
  cluster.nvlinkGBps = 1e6; // the network binds
  CollectiveGroup group = stridedGroup(32, 1, 8);
  ASSERT_EQ(group.nodes(), 4);
  double bytes = 8e9;
  double plain = allToAllSeconds(cluster, group, bytes);
  double deduped = dedupedDispatchSeconds(cluster, group, bytes, 8);
  double copies = 8 * 3.0 / 4, nodes = 3 * (1 - std::pow(0.75, 8));
  EXPECT_NEAR(deduped / plain, nodes / copies, 1e-3);
  // Inside one node there is nothing to deduplicate.
  CollectiveGroup node = stridedGroup(8, 1, 8);
  cluster.nvlinkGBps = 400;
  EXPECT_NEAR(dedupedDispatchSeconds(cluster, node, bytes, 8),
              allToAllSeconds(cluster, node, bytes), 1e-9);
}

// Megatron's batch-level overlap hides one microbatch's expert exchange
// behind another's whole layer, more than chunks hide behind the experts'
// own GEMMs.
TEST(PlannerTest, BatchLevelOverlapHidesTheExchangeBehindTheLayer) {
  ModelShape m = moeModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.dp = 64;
  plan.ep = 8;
  plan.microbatchSize = 1;
  ASSERT_FALSE(checkPlan(m, plan, 64));
  SoftwareTraits none;
  none.moeRun = false;
  none.chunkedExpertExchange = false;
  SoftwareTraits batch = none;
  batch.batchLevelExpertOverlap = true;
  PlanCost exposed = evaluatePlan(m, plan, cluster, 64, none);
  PlanCost hidden = evaluatePlan(m, plan, cluster, 64, batch);
  EXPECT_EQ(exposed.commSeconds.at("expert all-to-all"),
            hidden.commSeconds.at("expert all-to-all"));
  EXPECT_LT(hidden.stepSeconds, exposed.stepSeconds);
  EXPECT_LT(hidden.exposedCommSeconds, exposed.exposedCommSeconds);
}

// The busiest expert-parallel rank gets `imbalance` times the mean rows:
// its share of the all-to-all grows by as much (the test cluster has no
// latency, so exactly).
TEST(PlannerTest, ImbalanceScalesTheBusiestRanksExchange) {
  ModelShape m = moeModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.dp = 16;
  plan.ep = 8;
  plan.microbatchSize = 1;
  ASSERT_FALSE(checkPlan(m, plan, 16));
  SoftwareTraits balanced;
  balanced.moeRun = false;
  SoftwareTraits skewed = balanced;
  skewed.expertImbalance = 2;
  PlanCost a = evaluatePlan(m, plan, cluster, 16, balanced);
  PlanCost b = evaluatePlan(m, plan, cluster, 16, skewed);
  EXPECT_NEAR(b.commSeconds.at("expert all-to-all"),
              2 * a.commSeconds.at("expert all-to-all"), 1e-12);
  EXPECT_GT(b.computeSeconds, a.computeSeconds);
}

// Overlapped pipeline sends run beside the compute and slow it by the
// contention; waited for, they add their whole time.
TEST(PlannerTest, OverlappedPipelineSendsCostTheirContention) {
  ModelShape m = denseModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.pp = 4;
  plan.dp = 1;
  plan.microbatchSize = 1;
  ASSERT_FALSE(checkPlan(m, plan, 8));
  SoftwareTraits waiting;
  waiting.moeRun = false;
  SoftwareTraits overlapping = waiting;
  overlapping.overlapPipeline = true;
  PlanCost a = evaluatePlan(m, plan, cluster, 8, waiting, false);
  PlanCost b = evaluatePlan(m, plan, cluster, 8, overlapping, false);
  double sends = a.commSeconds.at("pipeline send/recv");
  ASSERT_GT(sends, 0);
  EXPECT_EQ(b.commSeconds.at("pipeline send/recv"), sends);
  EXPECT_NEAR(a.exposedCommSeconds - b.exposedCommSeconds,
              (1 - cluster.nvlinkContention) * sends,
              1e-9 * a.exposedCommSeconds);
}

// moe-run keeps each weight FSDP gathers from its forward to its backward
// (measured by bench/cpu-memory.sh): the stage's whole weights are held,
// where another software holds two layers' at a time.
TEST(PlannerTest, MoeRunHoldsFsdpsGatheredWeightsToTheBackward) {
  ModelShape m = moeModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.dp = 8;
  plan.ep = 4;
  plan.fsdp = true;
  plan.microbatchSize = 1;
  ASSERT_FALSE(checkPlan(m, plan, 8));
  SoftwareTraits other;
  other.moeRun = false;
  SoftwareTraits moeRun;
  PlanCost a = evaluatePlan(m, plan, cluster, 8, other);
  PlanCost b = evaluatePlan(m, plan, cluster, 8, moeRun);
  double whole =
      (m.denseParams() + m.expertParams() / plan.ep) * moeRun.weightBytes;
  EXPECT_NEAR(b.weightMemory - a.weightMemory, whole * (1 - 2.0 / m.layers),
              1e-6 * whole);
}

// Pipelined, moe-run still gathers in each microbatch's forward, into that
// microbatch's arena (moe-split-pipeline-stages places the all-gathers in
// the forward phase): one gather per microbatch and one copy of the
// stage's weights per microbatch in flight, where another software gathers
// once per step and keeps one copy.
TEST(PlannerTest, MoeRunGathersFsdpWeightsPerMicrobatchUnderAPipeline) {
  ModelShape m = denseModel();
  ClusterSpec cluster = testCluster();
  ParallelPlan plan;
  plan.dp = 4;
  plan.pp = 2;
  plan.fsdp = true;
  plan.microbatchSize = 1;
  plan.schedule = ::moe::pipeline::ScheduleKind::OneFOneB;
  ASSERT_FALSE(checkPlan(m, plan, 8));
  SoftwareTraits other;
  other.moeRun = false;
  SoftwareTraits moeRun;
  moeRun.weightBytes = other.weightBytes;
  PlanCost a = evaluatePlan(m, plan, cluster, 16, other);
  PlanCost b = evaluatePlan(m, plan, cluster, 16, moeRun);
  ASSERT_EQ(a.microbatches, 4);
  EXPECT_NEAR(b.commSeconds.at("fsdp all-gather"),
              4 * a.commSeconds.at("fsdp all-gather"),
              1e-9 * a.commSeconds.at("fsdp all-gather"));
  // Both store the stage's weights split over dp and hold gathered
  // copies: another software one, moe-run one per microbatch 1F1B keeps in
  // flight on the first stage (pp = 2 of them).
  double whole = a.weightMemory / (1 + 1.0 / plan.dp);
  EXPECT_NEAR(b.weightMemory - a.weightMemory, whole, 1e-9 * whole);
}
