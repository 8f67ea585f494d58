//===- Dispatch.cpp - run one instruction with the CPU kernels ------------===//
//
// One case per opcode. The operand/result layout is the verifier's
// (lib/Runtime/Artifact/InstructionRules.cpp), which also guarantees that
// the shapes read here have the ranks indexed and agree with each other.
// Activations [..., X] are passed to the kernels as [T, X].
//
//===----------------------------------------------------------------------===//

#include "Dispatch.h"
#include "Collectives.h"
#include "ExpertParallel.h"

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Comm/GroupSums.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Engine/GlobalNorm.h"
#include "moe/Runtime/Engine/StepChecks.h"
#include "moe/Runtime/IO/Trace.h"
#include "moe/Runtime/StepSemantics.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>

namespace moe::rt::engine {
namespace {

/// Typed access to an instruction's operands and results.
class Operands {
public:
  Operands(const StepContext &context, size_t index)
      : context(context), instruction(context.program.instructions[index]) {}

  const Buffer &in(size_t i) const { return buffer(instruction.operands[i]); }
  const Buffer &out(size_t i) const { return buffer(instruction.results[i]); }
  float *inF(size_t i) const { return f32(instruction.operands[i]); }
  float *outF(size_t i) const { return f32(instruction.results[i]); }
  int32_t *inI(size_t i) const { return i32(instruction.operands[i]); }
  int32_t *outI(size_t i) const { return i32(instruction.results[i]); }
  /// The value of a one-element operand.
  float scalar(size_t i) const { return *inF(i); }
  int64_t intAttr(size_t i) const { return instruction.intAttrs[i]; }
  float floatAttr(size_t i) const { return instruction.floatAttrs[i]; }

  const Instruction &instruction;

private:
  const Buffer &buffer(uint32_t b) const { return context.program.buffers[b]; }
  float *f32(uint32_t b) const {
    return reinterpret_cast<float *>(context.pointers[b]);
  }
  int32_t *i32(uint32_t b) const {
    return reinterpret_cast<int32_t *>(context.pointers[b]);
  }

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
                          const Operands &ops, size_t targetOperand,
                          int64_t vocab) {
  return engine::checkTargets(context.program, index, ops.in(targetOperand),
                              ops.inI(targetOperand), vocab)
      .status();
}

/// The group a loss's tokens are split over (its int attribute after the
/// `fixed` ones), or nullptr when they are all on this rank.
comm::Group *tokenGroup(const StepContext &context, const Operands &ops,
                        size_t fixed) {
  const std::vector<int64_t> &ints = ops.instruction.intAttrs;
  return ints.size() > fixed ? context.groups[ints[fixed]].get() : nullptr;
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
                        const Operands &ops) {
  size_t n = ops.instruction.operands.size();
  std::vector<double> squares(n, 0.0);
  const std::vector<bool> *foreign = context.foreignGradients;
  for (size_t i = 0; i < n; ++i)
    if (!foreign || !(*foreign)[ops.instruction.operands[i]])
      squares[i] = cpu::sumOfSquares(ops.inF(i), ops.in(i).numElements());
  absl::StatusOr<float> norm = engine::globalNormFromSquares(
      absl::MakeSpan(squares), ops.instruction.intAttrs,
      [&](int64_t g) -> comm::Group & { return *context.groups[g]; },
      context.stageGroup);
  if (!norm.ok())
    return inInstruction(context, index, norm.status());
  *ops.outF(0) = *norm;
  return absl::OkStatus();
}

/// AdamW on the gradient times `gradScale` (the clipping coefficient),
/// without modifying the gradient buffer: it may still be read by later
/// instructions or hooks. The update is elementwise, so running it on
/// chunks of a scaled copy is exact.
void adamwScaled(const Operands &ops, std::vector<float> &scratch) {
  float *param = ops.inF(0);
  const float *grad = ops.inF(1);
  float *expAvg = ops.inF(2), *expAvgSq = ops.inF(3);
  int64_t n = ops.in(0).numElements();
  float lr = ops.scalar(4), gradScale = ops.scalar(5);
  int64_t step = *ops.inI(6);
  float beta1 = ops.floatAttr(0), beta2 = ops.floatAttr(1);
  float eps = ops.floatAttr(2), weightDecay = ops.floatAttr(3);
  if (gradScale == 1.0f) {
    cpu::adamw(param, grad, expAvg, expAvgSq, n, lr, beta1, beta2, eps,
               weightDecay, step);
    return;
  }
  int64_t chunk = static_cast<int64_t>(scratch.size());
  for (int64_t begin = 0; begin < n; begin += chunk) {
    int64_t length = std::min(chunk, n - begin);
    for (int64_t i = 0; i < length; ++i)
      scratch[i] = grad[begin + i] * gradScale;
    cpu::adamw(param + begin, scratch.data(), expAvg + begin, expAvgSq + begin,
               length, lr, beta1, beta2, eps, weightDecay, step);
  }
}

absl::Status runKernel(const StepContext &context, size_t index) {
  Operands ops(context, index);
  switch (ops.instruction.opcode) {
  case Opcode::Embedding: {
    int64_t vocab = ops.in(1).shape[0], hidden = ops.in(1).shape[1];
    int64_t bad = cpu::embeddingForward(ops.inI(0), ops.inF(1), ops.outF(0),
                                        ops.in(0).numElements(), vocab, hidden);
    if (bad >= 0)
      return absl::InvalidArgumentError(absl::StrCat(
          describeInstruction(context.program, index), ": token id ",
          ops.inI(0)[bad], " at ", describeIdPosition(ops.in(0), bad),
          " is outside the embedding table [0, ", vocab, ")"));
    return absl::OkStatus();
  }
  case Opcode::EmbeddingGrad:
    cpu::embeddingBackward(ops.inF(0), ops.inI(1), ops.outF(0),
                           ops.in(1).numElements(), ops.out(0).shape[0],
                           ops.out(0).shape[1]);
    return absl::OkStatus();
  case Opcode::RmsNorm:
    cpu::rmsNormForward(ops.inF(0), ops.inF(1), ops.outF(0), rows(ops.in(0)),
                        last(ops.in(0)), ops.floatAttr(0));
    return absl::OkStatus();
  case Opcode::RmsNormGrad:
    cpu::rmsNormBackward(ops.inF(0), ops.inF(1), ops.inF(2), ops.outF(0),
                         ops.outF(1), rows(ops.in(0)), last(ops.in(0)),
                         ops.floatAttr(0));
    return absl::OkStatus();
  case Opcode::Linear:
    cpu::linearForward(ops.inF(0), ops.inF(1), ops.outF(0), rows(ops.in(0)),
                       last(ops.in(0)), ops.in(1).shape[0]);
    return absl::OkStatus();
  case Opcode::LinearGradInput:
    cpu::linearBackwardInput(ops.inF(0), ops.inF(1), ops.outF(0),
                             rows(ops.in(0)), ops.in(1).shape[1],
                             last(ops.in(0)));
    return absl::OkStatus();
  case Opcode::LinearGradWeight:
    cpu::linearBackwardWeight(ops.inF(0), ops.inF(1), ops.outF(0),
                              rows(ops.in(0)), last(ops.in(1)),
                              last(ops.in(0)));
    return absl::OkStatus();
  case Opcode::Rope:
  case Opcode::RopeGrad: {
    const std::vector<int64_t> &shape = ops.in(0).shape;
    int64_t heads = ops.intAttr(0);
    auto kernel = ops.instruction.opcode == Opcode::Rope ? cpu::ropeForward
                                                         : cpu::ropeBackward;
    kernel(ops.inF(0), ops.outF(0), shape[0], shape[1], heads, shape[2] / heads,
           ops.floatAttr(0));
    return absl::OkStatus();
  }
  case Opcode::Attention: {
    const std::vector<int64_t> &q = ops.in(0).shape;
    int64_t heads = ops.intAttr(0);
    cpu::attentionForward(ops.inF(0), ops.inF(1), ops.inF(2), ops.outF(0),
                          ops.outF(1), q[0], q[1], heads, ops.intAttr(1),
                          q[2] / heads);
    return absl::OkStatus();
  }
  case Opcode::AttentionGrad: {
    const std::vector<int64_t> &q = ops.in(1).shape;
    int64_t heads = ops.intAttr(0);
    cpu::attentionBackward(ops.inF(0), ops.inF(1), ops.inF(2), ops.inF(3),
                           ops.inF(4), ops.inF(5), ops.outF(0), ops.outF(1),
                           ops.outF(2), q[0], q[1], heads, ops.intAttr(1),
                           q[2] / heads);
    return absl::OkStatus();
  }
  case Opcode::Router:
    cpu::routerForward(ops.inF(0), ops.outF(0), ops.outF(1), ops.outI(2),
                       rows(ops.in(0)), last(ops.in(0)), ops.intAttr(0),
                       ops.floatAttr(0));
    return absl::OkStatus();
  case Opcode::RouterGrad: {
    const float *dprobs =
        ops.instruction.operands.size() == 3 ? ops.inF(2) : nullptr;
    cpu::routerBackward(ops.inF(0), dprobs, ops.inF(1), ops.outF(0),
                        rows(ops.in(1)), last(ops.in(1)), ops.intAttr(0));
    return absl::OkStatus();
  }
  case Opcode::Experts: {
    if (isExpertParallel(ops.instruction))
      return runExpertParallel(context, index);
    const std::vector<int64_t> &w1 = ops.in(3).shape;
    std::optional<cpu::Fp8Gemms> fp8 = fp8GemmsOf(ops.instruction, &context);
    cpu::expertsForward(ops.inF(0), ops.inF(1), ops.inI(2), ops.inF(3),
                        ops.inF(4), ops.inF(5), ops.outF(0), rows(ops.in(0)),
                        w1[2], w1[1], w1[0], last(ops.in(1)),
                        fp8 ? &*fp8 : nullptr);
    return absl::OkStatus();
  }
  case Opcode::ExpertsGrad: {
    if (isExpertParallel(ops.instruction))
      return runExpertParallel(context, index);
    const std::vector<int64_t> &w1 = ops.in(4).shape;
    std::optional<cpu::Fp8Gemms> fp8 = fp8GemmsOf(ops.instruction, &context);
    cpu::expertsBackward(ops.inF(0), ops.inF(1), ops.inF(2), ops.inI(3),
                         ops.inF(4), ops.inF(5), ops.inF(6), ops.outF(0),
                         ops.outF(1), ops.outF(2), ops.outF(3), ops.outF(4),
                         rows(ops.in(0)), w1[2], w1[1], w1[0], last(ops.in(2)),
                         fp8 ? &*fp8 : nullptr);
    return absl::OkStatus();
  }
  case Opcode::Swiglu:
    cpu::swigluForward(ops.inF(0), ops.inF(1), ops.outF(0),
                       ops.in(0).numElements());
    return absl::OkStatus();
  case Opcode::SwigluGrad:
    cpu::swigluBackward(ops.inF(0), ops.inF(1), ops.inF(2), ops.outF(0),
                        ops.outF(1), ops.in(0).numElements());
    return absl::OkStatus();
  case Opcode::Add:
    cpu::add(ops.inF(0), ops.inF(1), ops.outF(0), ops.in(0).numElements());
    return absl::OkStatus();
  case Opcode::CrossEntropy: {
    int64_t vocab = last(ops.in(0));
    if (absl::Status status = checkTargets(context, index, ops, 1, vocab);
        !status.ok())
      return status;
    comm::Group *group = tokenGroup(context, ops, 0);
    if (!group) {
      *ops.outF(0) = cpu::crossEntropyForward(ops.inF(0), ops.inI(1),
                                              rows(ops.in(0)), vocab);
      return absl::OkStatus();
    }
    // The mean over every rank's tokens: sums and counts add up first.
    cpu::CrossEntropySums sums =
        cpu::crossEntropySums(ops.inF(0), ops.inI(1), rows(ops.in(0)), vocab);
    if (absl::Status status = comm::sumOverGroup(*group, absl::MakeSpan(&sums.sum, 1),
                                           absl::MakeSpan(&sums.count, 1));
        !status.ok())
      return inInstruction(context, index, status);
    *ops.outF(0) = cpu::crossEntropyMean(sums);
    return absl::OkStatus();
  }
  case Opcode::CrossEntropyGrad: {
    int64_t vocab = last(ops.in(1));
    if (absl::Status status = checkTargets(context, index, ops, 2, vocab);
        !status.ok())
      return status;
    comm::Group *group = tokenGroup(context, ops, 0);
    if (!group) {
      cpu::crossEntropyBackward(ops.scalar(0), ops.inF(1), ops.inI(2),
                                ops.outF(0), rows(ops.in(1)), vocab);
      return absl::OkStatus();
    }
    int64_t count = cpu::crossEntropyCount(ops.inI(2), rows(ops.in(1)), vocab);
    if (absl::Status status =
            comm::sumOverGroup(*group, {}, absl::MakeSpan(&count, 1));
        !status.ok())
      return inInstruction(context, index, status);
    cpu::crossEntropyBackward(ops.scalar(0), ops.inF(1), ops.inI(2),
                              ops.outF(0), rows(ops.in(1)), vocab, count);
    return absl::OkStatus();
  }
  case Opcode::AuxLoss:
  case Opcode::AuxLossGrad: {
    bool forward = ops.instruction.opcode == Opcode::AuxLoss;
    const Buffer &probs = ops.in(forward ? 0 : 1);
    const float *p = ops.inF(forward ? 0 : 1);
    int64_t T = rows(probs), E = last(probs), topK = ops.intAttr(0);
    comm::Group *group = tokenGroup(context, ops, 1);
    if (!group) {
      if (forward)
        *ops.outF(0) = cpu::auxLossForward(p, T, E, topK);
      else
        cpu::auxLossBackward(ops.scalar(0), p, ops.outF(0), T, E, topK);
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
      *ops.outF(0) = cpu::auxLossFromStatistics(stats);
    else
      cpu::auxLossBackward(ops.scalar(0), stats, ops.outF(0), T);
    return absl::OkStatus();
  }
  case Opcode::WeightedSum: {
    // Read before the store: the result may alias an operand.
    size_t n = ops.instruction.operands.size();
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i)
      values[i] = ops.scalar(i);
    *ops.outF(0) =
        semantics::weightedSum(ops.instruction.floatAttrs.data(), values.data(), n);
    return absl::OkStatus();
  }
  case Opcode::Constant:
    cpu::fill(ops.outF(0), ops.floatAttr(0), ops.out(0).numElements());
    return absl::OkStatus();
  case Opcode::GlobalNorm:
    return globalNorm(context, index, ops);
  case Opcode::ClipCoefficient: {
    *ops.outF(0) = semantics::clipCoefficient(ops.floatAttr(0), ops.scalar(0));
    return absl::OkStatus();
  }
  case Opcode::LearningRate:
    *ops.outF(0) =
        cpu::learningRate(*ops.inI(0), ops.floatAttr(0), ops.floatAttr(1),
                          ops.intAttr(0), ops.intAttr(1));
    return absl::OkStatus();
  case Opcode::AdamW:
    adamwScaled(ops, context.scratch);
    return absl::OkStatus();
  case Opcode::AllReduce:
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
  case Opcode::Slice:
    return runCollective(context, index);
  case Opcode::Fp8AmaxUpdate:
    return runFp8AmaxUpdate(context, index);
  }
  return absl::InternalError(
      absl::StrCat(describeInstruction(context.program, index),
                   ": opcode without a kernel"));
}

} // namespace

absl::Status runInstruction(const StepContext &context, size_t index) {
  if (!context.trace)
    return runKernel(context, index);
  const Instruction &instruction = context.program.instructions[index];
  // Expert parallel instructions record their exchanges and their compute
  // themselves.
  if (isExpertParallel(instruction))
    return runKernel(context, index);
  bool communicates = instruction.opcode == Opcode::AllReduce ||
                      instruction.opcode == Opcode::AllGather ||
                      instruction.opcode == Opcode::ReduceScatter;
  io::TraceScope span(context.trace,
                      communicates ? io::TraceTrack::Communication
                                   : io::TraceTrack::Compute,
                      opcodeName(instruction.opcode));
  return runKernel(context, index);
}

} // namespace moe::rt::engine
