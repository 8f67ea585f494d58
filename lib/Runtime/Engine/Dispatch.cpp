//===- Dispatch.cpp - run one instruction with the CPU kernels ------------===//
//
// One run() per opcode, called by the dispatcher generated from the op
// table (Artifact/OpTable.td) with the opcode's view. The verifier
// guarantees that the shapes read here have the ranks indexed and agree
// with each other.
//
//===----------------------------------------------------------------------===//

#include "Dispatch.h"
#include "Bf16Staging.h"
#include "Collectives.h"
#include "ExpertParallel.h"
#include "RingAttention.h"

#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Comm/GroupSums.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Engine/GlobalNorm.h"
#include "moe/Runtime/Engine/StepChecks.h"
#include "moe/Runtime/HeadParts.h"
#include "moe/Runtime/IO/Trace.h"
#include "moe/Runtime/StepSemantics.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>

namespace moe::rt::engine {
namespace {

/// Buffers by index as the kernels take them.
class Buffers {
public:
  explicit Buffers(const StepContext &context) : context(context) {}

  const Buffer &buffer(uint32_t b) const { return context.program.buffers[b]; }
  float *f32(uint32_t b) const {
    return reinterpret_cast<float *>(context.pointers[b]);
  }
  int32_t *i32(uint32_t b) const {
    return reinterpret_cast<int32_t *>(context.pointers[b]);
  }
  /// The value of a one-element buffer.
  float scalar(uint32_t b) const { return *f32(b); }

private:
  const StepContext &context;
};

/// Rows of an activation [..., X]: the product of its leading dims. Taken
/// from the shape rather than numElements() / X so that X = 0 is fine.
int64_t rows(const Buffer &buffer) {
  int64_t count = 1;
  for (size_t d = 0; d + 1 < buffer.shape.size(); ++d)
    count *= buffer.shape[d];
  return count;
}

int64_t last(const Buffer &buffer) { return buffer.shape.back(); }

/// Targets index the logits' last dim; negative ones are ignored (HF -100),
/// ones >= V have no logit and are a data error.
absl::Status checkTargets(const StepContext &context, size_t index,
                          uint32_t targetBuffer, int64_t vocab) {
  Buffers buffers(context);
  return engine::checkTargets(context.program, index,
                              buffers.buffer(targetBuffer),
                              buffers.i32(targetBuffer), vocab)
      .status();
}

/// The group a loss's tokens are split over, or nullptr when they are all
/// on this rank.
comm::Group *tokenGroup(const StepContext &context,
                        std::optional<int64_t> group) {
  return group ? context.groups[*group].get() : nullptr;
}

/// Prefixes a communication error with the instruction it happened in.
absl::Status inInstruction(const StepContext &context, size_t index,
                           absl::Status status) {
  if (status.ok())
    return status;
  return absl::Status(status.code(),
                      absl::StrCat(describeInstruction(context.program, index),
                                   ": ", status.message()));
}

/// The global norm over operands of which some are split over groups: each
/// operand's sum of squares is summed over its group (int attribute i, -1
/// for none), then all are added in operand order, like on one rank.
absl::Status globalNorm(const StepContext &context, size_t index,
                        const ops::GlobalNormView &op) {
  Buffers buffers(context);
  const std::vector<uint32_t> &grads = op.grads();
  size_t n = grads.size();
  // Gradients other stages hold count as empty here (a sum of 0).
  const std::vector<bool> *foreign = context.foreignGradients;
  std::vector<const float *> data(n, nullptr);
  std::vector<int64_t> sizes(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (!foreign || !(*foreign)[grads[i]]) {
      data[i] = buffers.f32(grads[i]);
      sizes[i] = buffers.buffer(grads[i]).numElements();
    }
  std::vector<double> squares(n);
  cpu::sumsOfSquares(data.data(), sizes.data(), static_cast<int64_t>(n),
                     squares.data());
  absl::StatusOr<float> norm = engine::globalNormFromSquares(
      absl::MakeSpan(squares), op.groups(),
      [&](int64_t g) -> comm::Group & { return *context.groups[g]; },
      context.stageGroup);
  if (!norm.ok())
    return inInstruction(context, index, norm.status());
  *buffers.f32(op.norm()) = *norm;
  return absl::OkStatus();
}

/// AdamW on the gradient times `gradScale` (the clipping coefficient) of
/// `param`, the gradient's elements from there on (the parameter buffer,
/// or ZeRO-1's rows of it), without modifying the gradient buffer: it may
/// still be read by later instructions or hooks.
template <class View>
void adamwScaled(const Buffers &buffers, const View &op, float *param) {
  cpu::adamw(param, buffers.f32(op.grad()), buffers.f32(op.expAvg()),
             buffers.f32(op.expAvgSq()),
             buffers.buffer(op.grad()).numElements(), buffers.scalar(op.lr()),
             op.beta1(), op.beta2(), op.eps(), op.weightDecay(),
             *buffers.i32(op.step()), buffers.scalar(op.gradScale()));
}

/// The CPU backend of ops::dispatch: one run() per opcode, a kernel call
/// with the sizes from the verified shapes. Activations [..., X] are passed
/// to the kernels as [T, X].
class CpuKernels {
public:
  CpuKernels(const StepContext &context, size_t index)
      : context(context), index(index), buffers(context) {}

  absl::Status run(const ops::EmbeddingView &op) {
    const Buffer &table = in(op.table()), &tokens = in(op.tokens());
    int64_t vocab = table.shape[0], hidden = table.shape[1];
    int64_t bad =
        cpu::embeddingForward(i32(op.tokens()), f32(op.table()), f32(op.y()),
                              tokens.numElements(), vocab, hidden);
    if (bad >= 0)
      return absl::InvalidArgumentError(absl::StrCat(
          describeInstruction(context.program, index), ": token id ",
          i32(op.tokens())[bad], " at ", describeIdPosition(tokens, bad),
          " is outside the embedding table [0, ", vocab, ")"));
    return absl::OkStatus();
  }
  absl::Status run(const ops::EmbeddingGradView &op) {
    const Buffer &dtable = in(op.dtable());
    cpu::embeddingBackward(f32(op.dy()), i32(op.tokens()), f32(op.dtable()),
                           in(op.tokens()).numElements(), dtable.shape[0],
                           dtable.shape[1]);
    return absl::OkStatus();
  }
  absl::Status run(const ops::RmsNormView &op) {
    cpu::rmsNormForward(f32(op.x()), f32(op.w()), f32(op.y()), rows(in(op.x())),
                        last(in(op.x())), op.eps());
    return absl::OkStatus();
  }
  absl::Status run(const ops::RmsNormGradView &op) {
    cpu::rmsNormBackward(f32(op.dy()), f32(op.x()), f32(op.w()), f32(op.dx()),
                         f32(op.dw()), rows(in(op.dy())), last(in(op.dy())),
                         op.eps());
    return absl::OkStatus();
  }
  // Each head a row of D features.
  absl::Status run(const ops::HeadRmsNormView &op) {
    cpu::rmsNormForward(f32(op.x()), f32(op.w()), f32(op.y()),
                        rows(in(op.x())) * op.heads(), last(in(op.w())),
                        op.eps());
    return absl::OkStatus();
  }
  absl::Status run(const ops::HeadRmsNormGradView &op) {
    cpu::rmsNormBackward(f32(op.dy()), f32(op.x()), f32(op.w()), f32(op.dx()),
                         f32(op.dw()), rows(in(op.dy())) * op.heads(),
                         last(in(op.w())), op.eps());
    return absl::OkStatus();
  }
  absl::Status run(const ops::LinearView &op) {
    cpu::linearForward(f32(op.x()), f32(op.w()), f32(op.y()), rows(in(op.x())),
                       last(in(op.x())), in(op.w()).shape[0]);
    return absl::OkStatus();
  }
  absl::Status run(const ops::LinearGradInputView &op) {
    cpu::linearBackwardInput(f32(op.dy()), f32(op.w()), f32(op.dx()),
                             rows(in(op.dy())), in(op.w()).shape[1],
                             last(in(op.dy())));
    return absl::OkStatus();
  }
  absl::Status run(const ops::LinearAccumulateView &op) {
    cpu::linearForwardAccumulate(f32(op.x()), f32(op.w()), f32(op.addend()),
                                 f32(op.y()), rows(in(op.x())),
                                 last(in(op.x())), in(op.w()).shape[0]);
    return absl::OkStatus();
  }
  absl::Status run(const ops::LinearGradInputAccumulateView &op) {
    cpu::linearBackwardInputAccumulate(
        f32(op.dy()), f32(op.w()), f32(op.addend()), f32(op.dx()),
        rows(in(op.dy())), in(op.w()).shape[1], last(in(op.dy())));
    return absl::OkStatus();
  }
  absl::Status run(const ops::LinearGradWeightView &op) {
    cpu::linearBackwardWeight(f32(op.dy()), f32(op.x()), f32(op.dw()),
                              rows(in(op.dy())), last(in(op.x())),
                              last(in(op.dy())));
    return absl::OkStatus();
  }
  absl::Status run(const ops::RopeView &op) {
    return rope(cpu::ropeForward, op.x(), op.y(), op.heads(), op.theta(),
                ropeScalingOf(op), {}, op.sequence());
  }
  absl::Status run(const ops::RopeGradView &op) {
    return rope(cpu::ropeBackward, op.dy(), op.dx(), op.heads(), op.theta(),
                ropeScalingOf(op), {}, op.sequence());
  }
  absl::Status run(const ops::AttentionView &op) { return attention(op); }
  absl::Status run(const ops::AttentionGradView &op) {
    return attentionGrad(op);
  }
  absl::Status run(const ops::AttentionValueDimView &op) {
    return attention(op);
  }
  absl::Status run(const ops::AttentionValueDimGradView &op) {
    return attentionGrad(op);
  }
  absl::Status run(const ops::DocumentAttentionView &op) {
    return attention(op, op.positions());
  }
  absl::Status run(const ops::DocumentAttentionGradView &op) {
    return attentionGrad(op, op.positions());
  }
  // Context parallelism's ring: the blocks travel over the sequence group.
  absl::Status run(const ops::RingAttentionView &op) {
    return ringAttention(op, op.positions(), in(op.q()).shape[1]);
  }
  absl::Status run(const ops::RingAttentionGradView &op) {
    return ringAttention(op, op.positions(), in(op.q()).shape[1]);
  }
  absl::Status run(const ops::DocumentRopeView &op) {
    return rope(cpu::ropeForward, op.x(), op.y(), op.heads(), op.theta(),
                ropeScalingOf(op), op.positions(), op.sequence());
  }
  absl::Status run(const ops::DocumentRopeGradView &op) {
    return rope(cpu::ropeBackward, op.dy(), op.dx(), op.heads(), op.theta(),
                ropeScalingOf(op), op.positions(), op.sequence());
  }
  absl::Status run(const ops::ConcatHeadsView &op) {
    HeadParts parts = headParts(op.heads(), in(op.a()), in(op.b()), in(op.y()));
    cpu::concatHeads(f32(op.a()), f32(op.b()), f32(op.y()), rows(in(op.a())),
                     op.heads(), parts.aWidth, parts.bWidth, parts.sharedB);
    return absl::OkStatus();
  }
  absl::Status run(const ops::SplitHeadsView &op) {
    HeadParts parts = headParts(op.heads(), in(op.a()), in(op.b()), in(op.x()));
    cpu::splitHeads(f32(op.x()), f32(op.a()), f32(op.b()), rows(in(op.a())),
                    op.heads(), parts.aWidth, parts.bWidth, parts.sharedB);
    return absl::OkStatus();
  }
  absl::Status run(const ops::RouterView &op) {
    cpu::routerForward(f32(op.logits()), f32(op.probs()), f32(op.weights()),
                       i32(op.indices()), rows(in(op.logits())),
                       last(in(op.logits())), op.topK(), op.capacityFactor());
    return absl::OkStatus();
  }
  absl::Status run(const ops::RouterGradView &op) {
    std::optional<uint32_t> dprobs = op.dprobs();
    cpu::routerBackward(f32(op.dweights()), dprobs ? f32(*dprobs) : nullptr,
                        f32(op.probs()), f32(op.dlogits()),
                        rows(in(op.probs())), last(in(op.probs())), op.topK());
    return absl::OkStatus();
  }
  absl::Status run(const ops::ScoredRouterView &op) {
    cpu::routerForward(f32(op.logits()), f32(op.probs()), f32(op.weights()),
                       i32(op.indices()), rows(in(op.logits())),
                       last(in(op.logits())), op.topK(), op.capacityFactor(),
                       routingRule(op));
    return absl::OkStatus();
  }
  absl::Status run(const ops::ScoredRouterGradView &op) {
    cpu::routerBackward(f32(op.dweights()), f32(op.dprobs()), f32(op.probs()),
                        f32(op.dlogits()), rows(in(op.probs())),
                        last(in(op.probs())), op.topK(), routingRule(op));
    return absl::OkStatus();
  }
  absl::Status run(const ops::ExpertLoadView &op) {
    int64_t experts = last(in(op.load()));
    std::vector<int64_t> counts = cpu::expertCounts(
        i32(op.indices()), in(op.indices()).numElements(), experts);
    // The whole batch's load: summed over the ranks splitting the tokens.
    if (comm::Group *group = tokenGroup(context, op.group()))
      if (absl::Status status =
              comm::sumOverGroup(*group, {}, absl::MakeSpan(counts));
          !status.ok())
        return inInstruction(context, index, status);
    cpu::addExpertCounts(counts, f32(op.load()));
    return absl::OkStatus();
  }
  absl::Status run(const ops::ExpertLoadUpdateView &op) {
    std::optional<uint32_t> bias = op.bias();
    cpu::expertLoadUpdate(f32(op.load()), bias ? f32(*bias) : nullptr,
                          last(in(op.load())), op.rate());
    return absl::OkStatus();
  }
  absl::Status run(const ops::ExpertsView &op) {
    if (op.group())
      return runExpertParallel(context, index);
    return expertsForward(op, nullptr);
  }
  absl::Status run(const ops::ExpertsWithHiddenView &op) {
    return expertsForward(op, f32(op.hidden()));
  }
  absl::Status run(const ops::ExpertsGradView &op) {
    if (op.group())
      return runExpertParallel(context, index);
    return expertsBackward(op, nullptr);
  }
  absl::Status run(const ops::ExpertsGradWithHiddenView &op) {
    return expertsBackward(op, f32(op.hidden()));
  }
  /// The experts on this rank's tokens, writing the up projections to
  /// `hidden` when the instruction keeps them.
  template <class View>
  absl::Status expertsForward(const View &op, float *hidden) {
    const std::vector<int64_t> &w1 = in(op.w1()).shape;
    std::optional<cpu::Fp8Gemms> fp8 = fp8GemmsOf(op.instruction, &context);
    cpu::expertsForward(f32(op.x()), f32(op.weights()), i32(op.indices()),
                        f32(op.w1()), f32(op.w3()), f32(op.w2()), f32(op.y()),
                        rows(in(op.x())), w1[2], w1[1], w1[0],
                        last(in(op.weights())), fp8 ? &*fp8 : nullptr,
                        storedAsBf16(context, op.y()), hidden);
    return absl::OkStatus();
  }
  /// Their gradients, reading the saved up projections when given.
  template <class View>
  absl::Status expertsBackward(const View &op, const float *hidden) {
    const std::vector<int64_t> &w1 = in(op.w1()).shape;
    std::optional<cpu::Fp8Gemms> fp8 = fp8GemmsOf(op.instruction, &context);
    cpu::expertsBackward(
        f32(op.dy()), f32(op.x()), f32(op.weights()), i32(op.indices()),
        f32(op.w1()), f32(op.w3()), f32(op.w2()), f32(op.dx()),
        f32(op.dweights()), f32(op.dw1()), f32(op.dw3()), f32(op.dw2()),
        rows(in(op.dy())), w1[2], w1[1], w1[0], last(in(op.weights())),
        fp8 ? &*fp8 : nullptr, storedAsBf16(context, op.dx()), hidden);
    return absl::OkStatus();
  }
  absl::Status run(const ops::SwigluView &op) {
    cpu::swigluForward(f32(op.gate()), f32(op.up()), f32(op.y()),
                       in(op.gate()).numElements());
    return absl::OkStatus();
  }
  absl::Status run(const ops::SwigluGradView &op) {
    cpu::swigluBackward(f32(op.dy()), f32(op.gate()), f32(op.up()),
                        f32(op.dgate()), f32(op.dup()),
                        in(op.dy()).numElements());
    return absl::OkStatus();
  }
  absl::Status run(const ops::AddView &op) {
    cpu::add(f32(op.a()), f32(op.b()), f32(op.y()), in(op.a()).numElements());
    return absl::OkStatus();
  }
  // A loss's tokens may be split over a group: its mean is formed from the
  // sums and counts of every rank, its gradient divides by the total count.
  absl::Status run(const ops::CrossEntropyView &op) {
    const Buffer &logits = in(op.logits());
    int64_t vocab = last(logits);
    if (absl::Status status = checkTargets(context, index, op.targets(), vocab);
        !status.ok())
      return status;
    return storeMeanLoss(cpu::crossEntropySums(f32(op.logits()),
                                               i32(op.targets()), rows(logits),
                                               vocab),
                         op.group(), op.loss());
  }
  absl::Status run(const ops::CrossEntropyGradView &op) {
    const Buffer &logits = in(op.logits());
    int64_t vocab = last(logits);
    absl::StatusOr<int64_t> count =
        countedTargets(op.targets(), rows(logits), vocab, op.group());
    if (!count.ok())
      return count.status();
    cpu::crossEntropyBackward(buffers.scalar(op.dloss()), f32(op.logits()),
                              i32(op.targets()), f32(op.dlogits()),
                              rows(logits), vocab, *count);
    return absl::OkStatus();
  }
  absl::Status run(const ops::LinearCrossEntropyView &op) {
    const Buffer &x = in(op.x());
    int64_t vocab = in(op.w()).shape[0];
    if (absl::Status status = checkTargets(context, index, op.targets(), vocab);
        !status.ok())
      return status;
    return storeMeanLoss(
        cpu::linearCrossEntropySums(f32(op.x()), f32(op.w()), i32(op.targets()),
                                    f32(op.lse()), rows(x), last(x), vocab),
        op.group(), op.loss());
  }
  absl::Status run(const ops::LinearCrossEntropyGradView &op) {
    const Buffer &x = in(op.x());
    int64_t vocab = in(op.w()).shape[0];
    absl::StatusOr<int64_t> count =
        countedTargets(op.targets(), rows(x), vocab, op.group());
    if (!count.ok())
      return count.status();
    cpu::linearCrossEntropyBackward(buffers.scalar(op.dloss()), f32(op.x()),
                                    f32(op.w()), i32(op.targets()),
                                    f32(op.lse()), f32(op.dx()), f32(op.dw()),
                                    rows(x), last(x), vocab, *count);
    return absl::OkStatus();
  }
  absl::Status run(const ops::AuxLossView &op) {
    return auxLoss(op.probs(), op.topK(), op.group(), std::nullopt, op.loss());
  }
  absl::Status run(const ops::AuxLossGradView &op) {
    return auxLoss(op.probs(), op.topK(), op.group(), op.dloss(), op.dprobs());
  }
  absl::Status run(const ops::SequenceAuxLossView &op) {
    return sequenceAuxLoss(op.probs(), op.indices(), op.batchGroup(),
                           op.sequenceGroup(), std::nullopt, op.loss());
  }
  absl::Status run(const ops::SequenceAuxLossGradView &op) {
    return sequenceAuxLoss(op.probs(), op.indices(), op.batchGroup(),
                           op.sequenceGroup(), op.dloss(), op.dprobs());
  }
  absl::Status run(const ops::ZLossView &op) {
    const Buffer &logits = in(op.logits());
    cpu::ZLossSums sums =
        cpu::zLossSums(f32(op.logits()), rows(logits), last(logits));
    if (absl::Status status = sumTokens(op.group(), sums); !status.ok())
      return status;
    *f32(op.loss()) =
        sums.count == 0
            ? 0.0f
            : static_cast<float>(sums.sum / static_cast<double>(sums.count));
    return absl::OkStatus();
  }
  absl::Status run(const ops::ZLossGradView &op) {
    const Buffer &logits = in(op.logits());
    cpu::ZLossSums sums;
    sums.count = rows(logits);
    if (absl::Status status = sumTokens(op.group(), sums); !status.ok())
      return status;
    cpu::zLossBackward(buffers.scalar(op.dloss()), f32(op.logits()),
                       f32(op.dlogits()), rows(logits), last(logits),
                       sums.count);
    return absl::OkStatus();
  }
  absl::Status run(const ops::WeightedSumView &op) {
    // Read before the store: the result may alias an operand.
    const std::vector<uint32_t> &scalars = op.scalars();
    std::vector<float> values(scalars.size());
    for (size_t i = 0; i < scalars.size(); ++i)
      values[i] = buffers.scalar(scalars[i]);
    *f32(op.sum()) = semantics::weightedSum(op.coefficients().data(),
                                            values.data(), values.size());
    return absl::OkStatus();
  }
  absl::Status run(const ops::ConstantView &op) {
    cpu::fill(f32(op.y()), op.value(), in(op.y()).numElements());
    return absl::OkStatus();
  }
  absl::Status run(const ops::GlobalNormView &op) {
    return globalNorm(context, index, op);
  }
  absl::Status run(const ops::ClipCoefficientView &op) {
    *f32(op.coef()) =
        semantics::clipCoefficient(op.maxNorm(), buffers.scalar(op.norm()));
    return absl::OkStatus();
  }
  absl::Status run(const ops::LearningRateView &op) {
    *f32(op.lr()) = cpu::learningRate(*i32(op.step()), op.peak(), op.min(),
                                      op.warmup(), op.decay());
    return absl::OkStatus();
  }
  absl::Status run(const ops::AdamWView &op) {
    adamwScaled(buffers, op, f32(op.param()));
    // Mixed precision: the next forward reads the updated master rounded
    // to nearest even.
    if (std::optional<uint32_t> working = op.working())
      cpu::castToBf16(buffers.f32(op.param()),
                      reinterpret_cast<uint16_t *>(context.pointers[*working]),
                      in(op.param()).numElements());
    return absl::OkStatus();
  }
  absl::Status run(const ops::ShardedAdamWView &op) {
    // This rank's block is at its position in the group along dimension 0
    // of the whole copy (the group's all-gather order).
    comm::Group &group = *context.groups[op.group()];
    int64_t count = in(op.grad()).numElements();
    int64_t offset = static_cast<int64_t>(group.rank()) * count;
    std::optional<uint32_t> working = op.working();
    float *master = f32(op.param()) + (working ? 0 : offset);
    adamwScaled(buffers, op, master);
    uint32_t whole = working ? *working : op.param();
    absl::Status gathered = engine::gatherRows(
        group, master, count, context.pointers[whole], in(whole).dtype);
    if (!gathered.ok())
      return absl::Status(
          gathered.code(),
          absl::StrCat(describeInstruction(context.program, index), ": ",
                       gathered.message()));
    return absl::OkStatus();
  }
  absl::Status run(const ops::AllReduceView &) {
    return runCollective(context, index);
  }
  absl::Status run(const ops::AllGatherView &) {
    return runCollective(context, index);
  }
  absl::Status run(const ops::ReduceScatterView &) {
    return runCollective(context, index);
  }
  absl::Status run(const ops::SliceView &) {
    return runCollective(context, index);
  }
  absl::Status run(const ops::PipelineGradientSumView &) {
    return runPipelineGradientSum(context, index);
  }
  absl::Status run(const ops::ReduceBucketView &) {
    return runCollective(context, index);
  }
  absl::Status run(const ops::Fp8AmaxUpdateView &) {
    return runFp8AmaxUpdate(context, index);
  }
  absl::Status run(const ops::CastView &op) {
    int64_t n = in(op.x()).numElements();
    uint8_t *x = context.pointers[op.x()], *y = context.pointers[op.y()];
    if (in(op.x()).dtype == DType::F32)
      cpu::castToBf16(reinterpret_cast<const float *>(x),
                      reinterpret_cast<uint16_t *>(y), n);
    else
      cpu::castFromBf16(reinterpret_cast<const uint16_t *>(x),
                        reinterpret_cast<float *>(y), n);
    return absl::OkStatus();
  }
  absl::Status unknownOpcode(const Instruction &) {
    return absl::InternalError(
        absl::StrCat(describeInstruction(context.program, index),
                     ": opcode without a kernel"));
  }

private:
  const Buffer &in(uint32_t b) const { return buffers.buffer(b); }
  float *f32(uint32_t b) const { return buffers.f32(b); }
  int32_t *i32(uint32_t b) const { return buffers.i32(b); }

  template <class Kernel>
  absl::Status rope(Kernel kernel, uint32_t x, uint32_t y, int64_t heads,
                    float theta, const cpu::RopeScaling &scaling,
                    std::optional<uint32_t> positions = {},
                    std::optional<int64_t> sequence = {}) {
    const std::vector<int64_t> &shape = in(x).shape;
    std::vector<cpu::SequenceRun> runs = sequenceRuns(sequence, shape[1]);
    if (positions)
      if (absl::Status status = checkPositions(*positions, runs); !status.ok())
        return status;
    kernel(f32(x), f32(y), shape[0], shape[1], heads, shape[2] / heads, theta,
           positions ? i32(*positions) : nullptr, runs, scaling);
    return absl::OkStatus();
  }

  template <class View>
  absl::Status ringAttention(const View &op, std::optional<uint32_t> positions,
                             int64_t length) {
    if (positions)
      if (absl::Status status =
              checkPositions(*positions, sequenceRuns(op.sequence(), length));
          !status.ok())
        return status;
    return runRingAttention(context, index);
  }

  /// This rank's block of a sequence of `length` rows split over group
  /// `sequence` (context parallelism) as the kernels' runs; without one,
  /// the whole sequence as one run.
  std::vector<cpu::SequenceRun> sequenceRuns(std::optional<int64_t> sequence,
                                             int64_t length) {
    if (!sequence)
      return {{0, 0, length}};
    return sequenceBlockRuns(context.program, context.program.groups[*sequence],
                             length, context.groups[*sequence]->rank());
  }

  /// What attention and its gradient read alike: the queries' runs in the
  /// sequence, their checked document positions (null for none), and the
  /// keys' count (the whole sequence, or the queries' own), the query and
  /// value head widths.
  struct AttentionShape {
    std::vector<cpu::SequenceRun> runs;
    const int32_t *documents;
    int64_t B, S, keys, headDim, valueDim;
  };
  template <class View>
  absl::StatusOr<AttentionShape>
  attentionShape(const View &op, std::optional<uint32_t> positions) {
    const std::vector<int64_t> &q = in(op.q()).shape;
    AttentionShape shape;
    shape.runs = sequenceRuns(op.sequence(), q[1]);
    if (positions)
      if (absl::Status status = checkPositions(*positions, shape.runs);
          !status.ok())
        return status;
    shape.documents = positions ? i32(*positions) : nullptr;
    shape.B = q[0];
    shape.S = q[1];
    shape.keys = in(op.k()).shape[1];
    shape.headDim = q[2] / op.heads();
    shape.valueDim = in(op.out()).shape[2] / op.heads();
    return shape;
  }

  /// Attention, AttentionValueDim and DocumentAttention: the value heads'
  /// width is the output's (the queries' for Attention), and with
  /// `positions` each query sees its own document only.
  template <class View>
  absl::Status attention(const View &op,
                         std::optional<uint32_t> positions = {}) {
    absl::StatusOr<AttentionShape> s = attentionShape(op, positions);
    if (!s.ok())
      return s.status();
    cpu::attentionBlockForward(f32(op.q()), f32(op.k()), f32(op.v()),
                               f32(op.out()), f32(op.lse()), s->B, s->S,
                               s->keys, s->runs, op.heads(), op.kvHeads(),
                               s->headDim, s->valueDim, s->documents,
                               op.scaleFactor().value_or(1.0f));
    return absl::OkStatus();
  }
  /// The three gradients' backward, as attention().
  template <class View>
  absl::Status attentionGrad(const View &op,
                             std::optional<uint32_t> positions = {}) {
    absl::StatusOr<AttentionShape> s = attentionShape(op, positions);
    if (!s.ok())
      return s.status();
    cpu::attentionBlockBackward(
        f32(op.dout()), f32(op.q()), f32(op.k()), f32(op.v()), f32(op.out()),
        f32(op.lse()), f32(op.dq()), f32(op.dk()), f32(op.dv()), s->B, s->S,
        s->keys, s->runs, op.heads(), op.kvHeads(), s->headDim, s->valueDim,
        s->documents, op.scaleFactor().value_or(1.0f));
    return absl::OkStatus();
  }

  /// Document positions [B, S] as the kernels need them: each a token's
  /// position in a document that starts in the sequence (0, or the
  /// previous token's + 1). With `runs` (this rank's block of the
  /// sequence), a run's first token continues a document the block does
  /// not hold: any position up to its place in the whole sequence.
  absl::Status checkPositions(uint32_t positions,
                              const std::vector<cpu::SequenceRun> &runs) {
    const Buffer &buffer = in(positions);
    const int32_t *p = i32(positions);
    int64_t S = buffer.shape[1];
    std::vector<int64_t> runStart(S, 0); // a run's place in the whole + 1
    for (const cpu::SequenceRun &run : runs)
      runStart[run.local] = run.whole + 1;
    for (int64_t t = 0; t < buffer.numElements(); ++t) {
      int64_t s = t % S;
      bool valid = p[t] == 0 ||
                   (runStart[s] == 0 && s > 0 && p[t] == p[t - 1] + 1) ||
                   (runStart[s] > 0 && p[t] > 0 && p[t] < runStart[s]);
      if (!valid)
        return absl::InvalidArgumentError(absl::StrCat(
            describeInstruction(context.program, index), ": document position ",
            p[t], " at ", describeIdPosition(buffer, t),
            " is neither 0 nor the previous token's + 1"));
    }
    return absl::OkStatus();
  }

  /// The selection rule a ScoredRouter (or its gradient) carries.
  template <class View> cpu::RoutingRule routingRule(const View &op) {
    cpu::RoutingRule rule;
    rule.sigmoid = op.scoring() == RouterScoring::Sigmoid;
    rule.normalize = op.normalize();
    rule.scale = op.scale();
    rule.groups = op.groups();
    rule.topGroups = op.topGroups();
    if (std::optional<uint32_t> bias = op.bias())
      rule.bias = f32(*bias);
    return rule;
  }

  /// AuxLoss (no dloss: the loss into `out`) and AuxLossGrad (dprobs into
  /// `out`), over the group the tokens are split over when there is one.
  absl::Status auxLoss(uint32_t probs, int64_t topK,
                       std::optional<int64_t> groupIndex,
                       std::optional<uint32_t> dloss, uint32_t out) {
    bool forward = !dloss;
    const float *p = f32(probs);
    int64_t T = rows(in(probs)), E = last(in(probs));
    comm::Group *group = tokenGroup(context, groupIndex);
    if (!group) {
      if (forward)
        *f32(out) = cpu::auxLossForward(p, T, E, topK);
      else
        cpu::auxLossBackward(buffers.scalar(*dloss), p, f32(out), T, E, topK);
      return absl::OkStatus();
    }
    // Expert loads, probability sums and token counts over every rank's
    // tokens, in one exchange (the token count rides after the loads).
    cpu::AuxLossStatistics stats = cpu::auxLossStatistics(p, T, E, topK);
    stats.count.push_back(stats.tokens);
    if (absl::Status status = comm::sumOverGroup(
            *group, absl::MakeSpan(stats.probSum), absl::MakeSpan(stats.count));
        !status.ok())
      return inInstruction(context, index, status);
    stats.tokens = stats.count.back();
    stats.count.pop_back();
    if (forward)
      *f32(out) = cpu::auxLossFromStatistics(stats);
    else
      cpu::auxLossBackward(buffers.scalar(*dloss), stats, f32(out), T);
    return absl::OkStatus();
  }

  /// A verified ConcatHeads' or SplitHeads' parts (checkHeadParts).
  static HeadParts headParts(int64_t heads, const Buffer &a, const Buffer &b,
                             const Buffer &whole) {
    return *headPartsOf(heads, a.shape.back(), b.shape.back(),
                        whole.shape.back());
  }

  /// The z-loss's sums over the tokens' group, when there is one.
  absl::Status sumTokens(std::optional<int64_t> groupIndex,
                         cpu::ZLossSums &sums) {
    comm::Group *group = tokenGroup(context, groupIndex);
    if (!group)
      return absl::OkStatus();
    return inInstruction(context, index,
                         comm::sumOverGroup(*group,
                                            absl::MakeSpan(&sums.sum, 1),
                                            absl::MakeSpan(&sums.count, 1)));
  }

  /// SequenceAuxLoss (no dloss: the loss into `out`) and its gradient
  /// (dprobs into `out`): each sequence's statistics over the ranks that
  /// split its tokens, the mean over the ranks that split the sequences.
  absl::Status sequenceAuxLoss(uint32_t probs, uint32_t indices,
                               int64_t batchGroup, int64_t sequenceGroup,
                               std::optional<uint32_t> dloss, uint32_t out) {
    const Buffer &scores = in(probs);
    int64_t B = scores.shape[0], S = scores.shape[1], E = scores.shape[2];
    cpu::SequenceAuxStatistics stats = cpu::sequenceAuxStatistics(
        f32(probs), i32(indices), B, S, E, in(indices).shape[2]);
    auto groupOrNone = [&](int64_t group) {
      return tokenGroup(context, group >= 0 ? std::optional<int64_t>(group)
                                            : std::nullopt);
    };
    if (comm::Group *tokens = groupOrNone(sequenceGroup)) {
      // The sequence length rides after the counts.
      stats.count.push_back(stats.tokensPerSequence);
      if (absl::Status status =
              comm::sumOverGroup(*tokens, absl::MakeSpan(stats.scoreSum),
                                 absl::MakeSpan(stats.count));
          !status.ok())
        return inInstruction(context, index, status);
      stats.tokensPerSequence = stats.count.back();
      stats.count.pop_back();
    }
    double lossSum = dloss ? 0.0 : cpu::sequenceAuxLossSum(stats);
    int64_t sequences = B;
    if (comm::Group *batch = groupOrNone(batchGroup))
      if (absl::Status status =
              comm::sumOverGroup(*batch, absl::MakeSpan(&lossSum, 1),
                                 absl::MakeSpan(&sequences, 1));
          !status.ok())
        return inInstruction(context, index, status);
    if (dloss)
      cpu::sequenceAuxLossBackward(buffers.scalar(*dloss), sequences, stats,
                                   f32(probs), f32(out), B * S);
    else
      *f32(out) =
          sequences == 0
              ? 0.0f
              : static_cast<float>(lossSum / static_cast<double>(sequences));
    return absl::OkStatus();
  }

  /// other ranks' over the tokens' group first.
  absl::Status storeMeanLoss(cpu::CrossEntropySums sums,
                             std::optional<int64_t> group, uint32_t loss) {
    if (comm::Group *tokens = tokenGroup(context, group))
      if (absl::Status status =
              comm::sumOverGroup(*tokens, absl::MakeSpan(&sums.sum, 1),
                                 absl::MakeSpan(&sums.count, 1));
          !status.ok())
        return inInstruction(context, index, status);
    *f32(loss) = cpu::crossEntropyMean(sums);
    return absl::OkStatus();
  }
  /// The targets in [0, vocab) over the tokens' group; an error for a
  /// target past the vocabulary.
  absl::StatusOr<int64_t> countedTargets(uint32_t targets, int64_t rowCount,
                                         int64_t vocab,
                                         std::optional<int64_t> group) {
    if (absl::Status status = checkTargets(context, index, targets, vocab);
        !status.ok())
      return status;
    int64_t count = cpu::crossEntropyCount(i32(targets), rowCount, vocab);
    if (comm::Group *tokens = tokenGroup(context, group))
      if (absl::Status status =
              comm::sumOverGroup(*tokens, {}, absl::MakeSpan(&count, 1));
          !status.ok())
        return inInstruction(context, index, status);
    return count;
  }

  const StepContext &context;
  size_t index;
  Buffers buffers;
};

absl::Status runFp32Kernel(const StepContext &context, size_t index) {
  CpuKernels kernels(context, index);
  return ops::dispatch(kernels, context.program.instructions[index]);
}

/// BF16 operands and results go through fp32 images (Bf16Staging.h).
absl::Status runKernel(const StepContext &context, size_t index) {
  if (!needsBf16Staging(context.program, index))
    return runFp32Kernel(context, index);
  if (context.widened)
    return runStaged(context, *context.widened, index, runFp32Kernel);
  Program widened = widenBf16Buffers(context.program);
  return runStaged(context, widened, index, runFp32Kernel);
}

} // namespace

bool storedAsBf16(const StepContext &context, uint32_t b) {
  const Program &program =
      context.declared ? *context.declared : context.program;
  return program.buffers[b].dtype == DType::BF16;
}

std::vector<cpu::SequenceRun> sequenceBlockRuns(const Program &program,
                                                const AxisList &axes,
                                                int64_t length, int64_t g) {
  int64_t parts = program.partsOf(axes);
  semantics::SequenceRuns block = semantics::blockRuns(
      length * parts, program.balancedSplitOf(axes), parts, g);
  std::vector<cpu::SequenceRun> runs;
  for (int i = 0; i < block.count; ++i)
    runs.push_back({block.local[i], block.whole[i], block.length[i]});
  return runs;
}

absl::Status runInstruction(const StepContext &context, size_t index) {
  if (!context.trace)
    return runKernel(context, index);
  const Instruction &instruction = context.program.instructions[index];
  // Expert parallel and ring instructions record their exchanges and their
  // compute themselves.
  if (isExpertParallel(instruction) ||
      instruction.opcode == Opcode::RingAttention ||
      instruction.opcode == Opcode::RingAttentionGrad)
    return runKernel(context, index);
  bool communicates = instruction.opcode == Opcode::AllReduce ||
                      instruction.opcode == Opcode::AllGather ||
                      instruction.opcode == Opcode::ReduceScatter ||
                      instruction.opcode == Opcode::ReduceBucket;
  io::TraceScope span(context.trace,
                      communicates ? io::TraceTrack::Communication
                                   : io::TraceTrack::Compute,
                      opcodeName(instruction.opcode));
  return runKernel(context, index);
}

} // namespace moe::rt::engine
