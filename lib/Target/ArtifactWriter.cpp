//===- ArtifactWriter.cpp - a planned training step to a .moebin ----------===//
//
// Serialises the `train_step` function (after moe-plan-memory) into the
// runtime's schema (include/moe/Runtime/Artifact/Program.fbs): parameters and
// optimizer state become persistent buffers, function arguments the step's
// inputs, every other op result an arena temporary at its planned offset,
// and every op one instruction.
//
//===----------------------------------------------------------------------===//
#include "moe/Target/ArtifactWriter.h"
#include "moe/Target/ModelStatistics.h"
#include "moe/Transforms/ElementTypes.h"
#include "moe/Transforms/Sharding.h"
#include "moe/Transforms/Transforms.h"
#include "moe/Pipeline/Schedule.h"

#include "moe/Runtime/Artifact/OpTableCheck.h"
#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Artifact/Program_generated.h"
#include "moe/Runtime/Artifact/Seal.h"
#include "moe/Runtime/Program.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::moe;
namespace fb = ::moe::artifact;

namespace {
/// An instruction before it is written: opcode, buffers and attributes.
struct PendingInstruction {
  ::moe::rt::Opcode opcode;
  SmallVector<uint32_t> operands, results;
  SmallVector<int64_t> ints;
  SmallVector<float> floats;
  std::string location;
  int32_t stage = 0;
  fb::PipelinePhase phase = fb::PipelinePhase::Forward;
};

class ArtifactBuilder {
public:
  ArtifactBuilder(ModuleOp module, func::FuncOp step,
                  const ::moe::pipeline::Schedule *schedule)
      : module(module), step(step), schedule(schedule) {}

  LogicalResult build(uint64_t seed, StringRef target, llvm::raw_ostream &os);

private:
  uint32_t addBuffer(StringRef name, fb::BufferKind kind, fb::DType dtype,
                     ArrayRef<int64_t> shape, uint64_t offset = 0,
                     fb::Init init = fb::Init::None, float initStd = 0,
                     bool weightDecay = false, ShardingAttr split = {},
                     uint32_t master = 0);
  /// The index of the group over `axes`, added on first use.
  int64_t groupOf(ArrayRef<StringRef> axes);
  flatbuffers::Offset<fb::Axes> axesOffset(ArrayRef<StringRef> axes);
  uint32_t paramBuffer(FlatSymbolRefAttr ref) {
    return paramBuffers.lookup(ref.getAttr());
  }
  LogicalResult verifyStepSignature();
  LogicalResult addParams();
  LogicalResult addInstruction(Operation *op);
  FailureOr<PendingInstruction> encode(Operation *op);
  LogicalResult addPipelineTags(Operation *op, PendingInstruction &inst);
  flatbuffers::Offset<fb::Pipeline> pipelineOffset();

  ModuleOp module;
  func::FuncOp step;
  const ::moe::pipeline::Schedule *schedule;
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::Buffer>> buffers;
  std::vector<PendingInstruction> instructions;
  llvm::DenseMap<Value, uint32_t> valueBuffers;
  llvm::DenseMap<StringAttr, uint32_t> paramBuffers;
  /// Parameters already given their update, with the pipeline stage of
  /// the AdamW (0 for the other updates).
  llvm::DenseSet<std::pair<Attribute, int64_t>> updated;
  /// The collectives' groups, in order of first use.
  std::vector<SmallVector<StringRef>> groups;
};
} // namespace

flatbuffers::Offset<fb::Axes>
ArtifactBuilder::axesOffset(ArrayRef<StringRef> axes) {
  std::vector<flatbuffers::Offset<flatbuffers::String>> names;
  for (StringRef axis : axes)
    names.push_back(fbb.CreateString(axis.str()));
  return fb::CreateAxes(fbb, fbb.CreateVector(names));
}

int64_t ArtifactBuilder::groupOf(ArrayRef<StringRef> axes) {
  for (auto [i, group] : llvm::enumerate(groups))
    if (llvm::equal(group, axes))
      return i;
  groups.emplace_back(axes.begin(), axes.end());
  return groups.size() - 1;
}

uint32_t ArtifactBuilder::addBuffer(StringRef name, fb::BufferKind kind,
                                    fb::DType dtype, ArrayRef<int64_t> shape,
                                    uint64_t offset, fb::Init init,
                                    float initStd, bool weightDecay,
                                    ShardingAttr split, uint32_t master) {
  auto nameOffset = fbb.CreateString(name.str());
  auto shapeOffset =
      fbb.CreateVector(std::vector<int64_t>(shape.begin(), shape.end()));
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Axes>>>
      splitOffset;
  if (split && !split.isReplicated()) {
    std::vector<flatbuffers::Offset<fb::Axes>> dims;
    for (unsigned d = 0; d < split.getDims().size(); ++d)
      dims.push_back(axesOffset(split.axesOf(d)));
    splitOffset = fbb.CreateVector(dims);
  }
  buffers.push_back(fb::CreateBuffer(fbb, nameOffset, kind, dtype, shapeOffset,
                                     offset, init, initStd, weightDecay,
                                     splitOffset, master));
  return buffers.size() - 1;
}

static fb::Init toSchema(InitKind kind) {
  switch (kind) {
  case InitKind::none:
    return fb::Init::None;
  case InitKind::zeros:
    return fb::Init::Zeros;
  case InitKind::ones:
    return fb::Init::Ones;
  case InitKind::normal:
    return fb::Init::Normal;
  }
  llvm_unreachable("unknown init kind");
}

static fb::DType toSchema(::moe::rt::DType dtype) {
  // DType.h mirrors the schema value for value (the reader checks it).
  return static_cast<fb::DType>(dtype);
}

/// The schema dtype of a tensor value, or an error naming it.
static FailureOr<fb::DType> dtypeOf(Value value) {
  FailureOr<::moe::rt::DType> dtype = artifactDTypeOf(value);
  if (failed(dtype))
    return failure();
  return toSchema(*dtype);
}

/// The runtime feeds tokens, targets (i32 [B, S]), with document masking
/// each token's position in its document (i32 [B, S]), and the step (i32
/// scalar), and reads back three f32 scalars computed in the step.
LogicalResult ArtifactBuilder::verifyStepSignature() {
  auto signatureError = [&]() {
    return step.emitOpError()
           << "expected train_step(tokens: tensor<BxSxi32>, targets: "
              "tensor<BxSxi32>, [positions: tensor<BxSxi32>,] step: "
              "tensor<i32>) -> (loss, grad_norm, lr: tensor<f32>)";
  };
  Block &body = step.getBody().front();
  unsigned inputs = body.getNumArguments();
  if ((inputs != 3 && inputs != 4) || step.getNumResults() != 3)
    return signatureError();
  auto tokens = dyn_cast<RankedTensorType>(body.getArgument(0).getType());
  auto i32Scalar = RankedTensorType::get({}, IntegerType::get(step.getContext(), 32));
  auto f32Scalar = RankedTensorType::get({}, Float32Type::get(step.getContext()));
  if (!tokens || tokens.getRank() != 2 ||
      !tokens.getElementType().isInteger(32) ||
      body.getArgument(1).getType() != tokens ||
      (inputs == 4 && body.getArgument(2).getType() != tokens) ||
      body.getArgument(inputs - 1).getType() != i32Scalar)
    return signatureError();
  for (Value result : body.getTerminator()->getOperands()) {
    if (result.getType() != f32Scalar)
      return signatureError();
    // The runtime reads outputs from the arena: they must be op results.
    Operation *def = result.getDefiningOp();
    if (!def || isa<GetParamOp>(def))
      return step.emitOpError()
             << "expected loss, grad_norm and lr to be computed by the step";
  }
  return success();
}

LogicalResult ArtifactBuilder::addParams() {
  // Parameters take consecutive buffers in declaration order; a working
  // copy names its master's index (the dialect verifier checked that the
  // master exists), wherever the master is declared.
  llvm::DenseMap<StringAttr, uint32_t> masterIndex;
  uint32_t next = buffers.size();
  for (ParamOp param : module.getOps<ParamOp>())
    masterIndex[param.getSymNameAttr()] = next++;
  for (ParamOp param : module.getOps<ParamOp>()) {
    bool weight = param.getKind() == ParamKind::weight;
    float std = param.getInitStd() ? param.getInitStd()->convertToFloat() : 0;
    FailureOr<::moe::rt::DType> dtype = artifactDTypeAt(
        param, "@" + param.getSymName(), param.getTensorType());
    if (failed(dtype))
      return failure();
    bool working = param.getKind() == ParamKind::working_copy;
    fb::BufferKind kind = weight    ? fb::BufferKind::Parameter
                          : working ? fb::BufferKind::WorkingCopy
                                    : fb::BufferKind::OptimizerState;
    paramBuffers[param.getSymNameAttr()] = addBuffer(
        param.getSymName(), kind, toSchema(*dtype),
        param.getTensorType().getShape(), 0, toSchema(param.getInit()), std,
        weight && !param.getNoWeightDecay(),
        param.getSharding() ? *param.getSharding() : ShardingAttr(),
        working ? masterIndex.lookup(param.getMasterAttr().getAttr()) : 0);
  }
  return success();
}

static std::string locationString(Location loc) {
  std::string text;
  llvm::raw_string_ostream os(text);
  loc.print(os);
  return text;
}

static SmallVector<StringRef> names(ArrayAttr axes) {
  return llvm::to_vector(axes.getAsValueRange<StringAttr>());
}

/// The schema's name of an FP8 scaling (the dialect's enum has no "none":
/// FP8 on the wire only is no scaling with fp8_dispatch).
static ::moe::rt::Fp8Scaling toSchema(std::optional<Fp8Scaling> scaling) {
  if (!scaling)
    return ::moe::rt::Fp8Scaling::None;
  switch (*scaling) {
  case Fp8Scaling::tensorwise:
    return ::moe::rt::Fp8Scaling::Tensorwise;
  case Fp8Scaling::blockwise:
    return ::moe::rt::Fp8Scaling::Blockwise;
  case Fp8Scaling::delayed:
    return ::moe::rt::Fp8Scaling::Delayed;
  }
  llvm_unreachable("unknown FP8 scaling");
}

/// The schema's name of a router's scoring.
static ::moe::rt::RouterScoring routerScoring(RouterScoring scoring) {
  switch (scoring) {
  case RouterScoring::softmax:
    return ::moe::rt::RouterScoring::Softmax;
  case RouterScoring::sigmoid:
    return ::moe::rt::RouterScoring::Sigmoid;
  }
  llvm_unreachable("unknown router scoring");
}

/// A rope op's scaling as the rope opcodes' rope_scaling set (3.10);
/// none for unscaled RoPE. Each kind's unread parameters are written as
/// the attribute holds them (their neutral values).
static std::optional<::moe::rt::ops::RopeScalingAttrs>
ropeScalingAttrs(RopeScalingAttr scaling) {
  if (!scaling)
    return std::nullopt;
  ::moe::rt::ops::RopeScalingAttrs attrs;
  switch (scaling.getKind()) {
  case RopeScalingKind::linear:
    attrs.scaling = ::moe::rt::RopeScaling::Linear;
    break;
  case RopeScalingKind::yarn:
    attrs.scaling = ::moe::rt::RopeScaling::Yarn;
    break;
  case RopeScalingKind::llama3:
    attrs.scaling = ::moe::rt::RopeScaling::Llama3;
    break;
  }
  attrs.originalMaxPositions = scaling.getOriginalMaxPositionEmbeddings();
  attrs.truncate = scaling.getTruncate();
  attrs.factor = static_cast<float>(scaling.getFactor().convertToDouble());
  attrs.betaFast = static_cast<float>(scaling.getBetaFast().convertToDouble());
  attrs.betaSlow = static_cast<float>(scaling.getBetaSlow().convertToDouble());
  attrs.lowFreqFactor = static_cast<float>(scaling.getLowFreqFactor().convertToDouble());
  attrs.highFreqFactor = static_cast<float>(scaling.getHighFreqFactor().convertToDouble());
  attrs.attentionFactor = static_cast<float>(scaling.getAttentionFactor().convertToDouble());
  return attrs;
}

/// An attention op's softmax scale factor (3.10), where it has one.
static std::optional<float> scaleFactorOf(FloatAttr factor) {
  if (!factor)
    return std::nullopt;
  return factor.getValue().convertToFloat();
}

FailureOr<PendingInstruction> ArtifactBuilder::encode(Operation *op) {
  namespace ops = ::moe::rt::ops;
  PendingInstruction inst;
  // The group over `axes`, if there are any.
  auto groupOver = [&](std::optional<ArrayAttr> axes) {
    std::optional<int64_t> group;
    if (axes && !axes->empty())
      group = groupOf(names(*axes));
    return group;
  };
  auto f = [](FloatAttr attr) { return attr.getValue().convertToFloat(); };
  // The experts' FP8 recipe (version 1.3): the scaling, the block (128
  // unless given) and whether tokens travel in FP8.
  auto fp8Recipe = [](auto o) {
    std::optional<ops::Fp8Attrs> recipe;
    if (o.getFp8() || o.getFp8Dispatch())
      recipe = ops::Fp8Attrs{toSchema(o.getFp8()),
                               static_cast<int64_t>(o.getFp8Block().value_or(128)),
                               o.getFp8Dispatch()};
    return recipe;
  };
  auto set = [&](ops::EncodedAttrs attrs) {
    inst.opcode = attrs.opcode;
    inst.ints.assign(attrs.ints.begin(), attrs.ints.end());
    inst.floats.assign(attrs.floats.begin(), attrs.floats.end());
    return success();
  };
  LogicalResult known =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case([&](EmbeddingOp) { return set(ops::buildEmbedding()); })
          .Case([&](EmbeddingGradOp) { return set(ops::buildEmbeddingGrad()); })
          // Per-head norms are opcodes of 3.5.
          .Case([&](RMSNormOp o) {
            if (std::optional<uint64_t> heads = o.getNumHeads())
              return set(ops::buildHeadRmsNorm(f(o.getEpsilonAttr()),
                                               static_cast<int64_t>(*heads)));
            return set(ops::buildRmsNorm(f(o.getEpsilonAttr())));
          })
          .Case([&](RMSNormGradOp o) {
            if (std::optional<uint64_t> heads = o.getNumHeads())
              return set(ops::buildHeadRmsNormGrad(
                  f(o.getEpsilonAttr()), static_cast<int64_t>(*heads)));
            return set(ops::buildRmsNormGrad(f(o.getEpsilonAttr())));
          })
          // The forms with an epilogue addend are opcodes of 3.4.
          .Case([&](LinearOp o) {
            return set(o.getAddend() ? ops::buildLinearAccumulate()
                                     : ops::buildLinear());
          })
          .Case([&](LinearGradInputOp o) {
            return set(o.getAddend() ? ops::buildLinearGradInputAccumulate()
                                     : ops::buildLinearGradInput());
          })
          .Case([&](LinearGradWeightOp) {
            return set(ops::buildLinearGradWeight());
          })
          // With document positions, opcodes of 3.7; a sequence split
          // over the mesh (context parallelism) is a group of 3.8.
          // Scaled RoPE is an attribute set of 3.10.
          .Case([&](RoPEOp o) {
            return set(
                (o.getPositions() ? ops::buildDocumentRope : ops::buildRope)(
                    o.getNumHeads(), f(o.getThetaAttr()),
                    groupOver(o.getSequenceAxes()),
                    ropeScalingAttrs(o.getScalingAttr())));
          })
          .Case([&](RoPEGradOp o) {
            return set((o.getPositions() ? ops::buildDocumentRopeGrad
                                         : ops::buildRopeGrad)(
                o.getNumHeads(), f(o.getThetaAttr()),
                groupOver(o.getSequenceAxes()),
                ropeScalingAttrs(o.getScalingAttr())));
          })
          // Values of their own head width (MLA) are opcodes of 3.6; with
          // document positions, of 3.7 (any value width).
          // Ring attention (context parallelism) is an opcode of 3.8.
          .Case([&](AttentionOp o) {
            if (o.getRing())
              return set(ops::buildRingAttention(
                  o.getNumHeads(), o.getNumKvHeads(),
                  *groupOver(o.getSequenceAxes()),
                  scaleFactorOf(o.getScaleFactorAttr())));
            bool ownValueDim =
                o.getOutput().getType() != o.getQuery().getType();
            return set((o.getPositions() ? ops::buildDocumentAttention
                        : ownValueDim    ? ops::buildAttentionValueDim
                                         : ops::buildAttention)(
                o.getNumHeads(), o.getNumKvHeads(),
                groupOver(o.getSequenceAxes()),
                scaleFactorOf(o.getScaleFactorAttr())));
          })
          .Case([&](AttentionGradOp o) {
            if (o.getRing())
              return set(ops::buildRingAttentionGrad(
                  o.getNumHeads(), o.getNumKvHeads(),
                  *groupOver(o.getSequenceAxes()),
                  scaleFactorOf(o.getScaleFactorAttr())));
            bool ownValueDim = o.getGrad().getType() != o.getQuery().getType();
            return set((o.getPositions() ? ops::buildDocumentAttentionGrad
                        : ownValueDim    ? ops::buildAttentionValueDimGrad
                                         : ops::buildAttentionGrad)(
                o.getNumHeads(), o.getNumKvHeads(),
                groupOver(o.getSequenceAxes()),
                scaleFactorOf(o.getScaleFactorAttr())));
          })
          .Case([&](ConcatHeadsOp o) {
            return set(ops::buildConcatHeads(o.getNumHeads()));
          })
          .Case([&](SplitHeadsOp o) {
            return set(ops::buildSplitHeads(o.getNumHeads()));
          })
          // HF Mixtral's router keeps the opcodes of 1.0; any other
          // selection rule is a ScoredRouter of 3.5.
          .Case([&](RouterOp o) {
            if (o.isMixtralRouter())
              return set(
                  ops::buildRouter(o.getTopK(), f(o.getCapacityFactorAttr())));
            return set(ops::buildScoredRouter(
                o.getTopK(), f(o.getCapacityFactorAttr()),
                routerScoring(o.getScoring()), o.getNormalize(),
                f(o.getScaleAttr()), o.getGroups(), o.getTopGroups()));
          })
          .Case([&](RouterGradOp o) -> LogicalResult {
            if (o.isMixtralRouter())
              return set(ops::buildRouterGrad(o.getTopK()));
            if (!o.getProbsGrad())
              return o.emitOpError()
                     << "cannot be written: the artifact's ScoredRouterGrad "
                        "reads probs_grad, which this op lacks";
            return set(ops::buildScoredRouterGrad(
                o.getTopK(), routerScoring(o.getScoring()), o.getNormalize(),
                f(o.getScaleAttr()), o.getGroups(), o.getTopGroups()));
          })
          // The forms that keep the up projections are opcodes of 3.2.
          .Case([&](ExpertsOp o) {
            auto build =
                o.getHidden() ? ops::buildExpertsWithHidden : ops::buildExperts;
            return set(build(groupOver(o.getExpertAxes()), fp8Recipe(o)));
          })
          .Case([&](ExpertsGradOp o) {
            auto build = o.getHidden() ? ops::buildExpertsGradWithHidden
                                       : ops::buildExpertsGrad;
            return set(build(groupOver(o.getExpertAxes()), fp8Recipe(o)));
          })
          .Case([&](SwiGLUOp) { return set(ops::buildSwiglu()); })
          .Case([&](SwiGLUGradOp) { return set(ops::buildSwigluGrad()); })
          .Case([&](AddOp) { return set(ops::buildAdd()); })
          // A parameter two pipeline stages hold: an opcode of 3.7.
          .Case([&](PipelineGradientSumOp) {
            return set(ops::buildPipelineGradientSum());
          })
          .Case([&](CrossEntropyOp o) {
            return set(ops::buildCrossEntropy(groupOver(o.getTokenAxes())));
          })
          .Case([&](CrossEntropyGradOp o) {
            return set(
                ops::buildCrossEntropyGrad(groupOver(o.getTokenAxes())));
          })
          .Case([&](LinearCrossEntropyOp o) {
            return set(
                ops::buildLinearCrossEntropy(groupOver(o.getTokenAxes())));
          })
          .Case([&](LinearCrossEntropyGradOp o) {
            return set(
                ops::buildLinearCrossEntropyGrad(groupOver(o.getTokenAxes())));
          })
          .Case([&](AuxLossOp o) {
            return set(ops::buildAuxLoss(o.getTopK(),
                                         groupOver(o.getTokenAxes())));
          })
          .Case([&](AuxLossGradOp o) {
            return set(ops::buildAuxLossGrad(o.getTopK(),
                                             groupOver(o.getTokenAxes())));
          })
          // The router losses are opcodes of 3.6.
          .Case([&](SequenceAuxLossOp o) {
            return set(ops::buildSequenceAuxLoss(
                groupOver(o.getBatchAxes()).value_or(-1),
                groupOver(o.getSequenceAxes()).value_or(-1)));
          })
          .Case([&](SequenceAuxLossGradOp o) {
            return set(ops::buildSequenceAuxLossGrad(
                groupOver(o.getBatchAxes()).value_or(-1),
                groupOver(o.getSequenceAxes()).value_or(-1)));
          })
          .Case([&](ZLossOp o) {
            return set(ops::buildZLoss(groupOver(o.getTokenAxes())));
          })
          .Case([&](ZLossGradOp o) {
            return set(ops::buildZLossGrad(groupOver(o.getTokenAxes())));
          })
          .Case([&](AllReduceOp o) {
            return set(ops::buildAllReduce(groupOf(names(o.getAxes()))));
          })
          .Case([&](AllGatherOp o) {
            return set(
                ops::buildAllGather(groupOf(names(o.getAxes())), o.getDim()));
          })
          .Case([&](ReduceScatterOp o) {
            return set(ops::buildReduceScatter(groupOf(names(o.getAxes())),
                                               o.getDim()));
          })
          .Case([&](ReduceBucketOp o) {
            return set(ops::buildReduceBucket(groupOf(names(o.getAxes())),
                                              o.getScatter()));
          })
          .Case([&](SliceOp o) {
            return set(
                ops::buildSlice(groupOf(names(o.getAxes())), o.getDim()));
          })
          .Case([&](WeightedSumOp o) {
            return set(ops::buildWeightedSum(
                std::vector<float>(o.getCoefficients().begin(),
                                   o.getCoefficients().end())));
          })
          .Case([&](ConstantOp o) {
            return set(ops::buildConstant(f(o.getValueAttr())));
          })
          .Case([&](GlobalNormOp o) {
            // One group per input that is split (-1: whole on every rank).
            std::vector<int64_t> perInput;
            if (std::optional<ArrayAttr> axes = o.getInputAxes())
              for (Attribute input : *axes) {
                SmallVector<StringRef> inputAxes =
                    names(cast<ArrayAttr>(input));
                perInput.push_back(inputAxes.empty() ? -1
                                                     : groupOf(inputAxes));
              }
            if (llvm::all_of(perInput, [](int64_t g) { return g < 0; }))
              perInput.clear();
            return set(ops::buildGlobalNorm(std::move(perInput)));
          })
          .Case([&](ClipCoefficientOp o) {
            return set(ops::buildClipCoefficient(f(o.getMaxNormAttr())));
          })
          .Case([&](LearningRateOp o) {
            return set(ops::buildLearningRate(o.getWarmup(), o.getDecaySteps(),
                                              f(o.getPeakAttr()),
                                              f(o.getMinAttr())));
          })
          .Case([&](ExpertLoadOp o) {
            return set(ops::buildExpertLoad(groupOver(o.getTokenAxes())));
          })
          .Case([&](ExpertLoadUpdateOp o) {
            return set(ops::buildExpertLoadUpdate(f(o.getRateAttr())));
          })
          .Case([&](Fp8AmaxUpdateOp o) {
            return set(ops::buildFp8AmaxUpdate(groupOver(o.getAxes())));
          })
          .Case([&](CastOp) { return set(ops::buildCast()); })
          .Case([&](AdamWUpdateOp o) {
            // ZeRO-1 (3.9): the update of a block, gathered over its group.
            if (std::optional<int64_t> group = groupOver(o.getGatherAxes()))
              return set(ops::buildShardedAdamW(
                  f(o.getBeta1Attr()), f(o.getBeta2Attr()), f(o.getEpsAttr()),
                  f(o.getWeightDecayAttr()), *group));
            return set(ops::buildAdamW(f(o.getBeta1Attr()), f(o.getBeta2Attr()),
                                       f(o.getEpsAttr()),
                                       f(o.getWeightDecayAttr())));
          })
          .Default([&](Operation *other) {
            return other->emitOpError()
                   << "has no runtime kernel (lower it before writing the "
                      "artifact)";
          });
  if (failed(known))
    return failure();

  if (auto update = dyn_cast<AdamWUpdateOp>(op)) {
    // Two pipeline stages that share a parameter update a copy each.
    auto stage = op->getAttrOfType<IntegerAttr>(kPipelineStageAttrName);
    if (!updated.insert({update.getParamAttr(), stage ? stage.getInt() : 0})
             .second)
      return update.emitOpError() << "updates " << update.getParamAttr()
                                  << " a second time in one step";
    // The schema's AdamW operand order: param, grad, moments, scalars.
    inst.operands = {paramBuffer(update.getParamAttr()),
                     valueBuffers.lookup(update.getGrad()),
                     paramBuffer(update.getExpAvgAttr()),
                     paramBuffer(update.getExpAvgSqAttr()),
                     valueBuffers.lookup(update.getLr()),
                     valueBuffers.lookup(update.getGradScale()),
                     valueBuffers.lookup(update.getStep())};
    // Mixed precision: the BF16 copy the update is rounded into (3.1).
    if (FlatSymbolRefAttr working = update.getWorkingCopyAttr())
      inst.operands.push_back(paramBuffer(working));
  } else if (auto update = dyn_cast<Fp8AmaxUpdateOp>(op)) {
    if (!updated.insert({update.getHistoryAttr(), 0}).second)
      return update.emitOpError() << "updates " << update.getHistoryAttr()
                                  << " a second time in one step";
    inst.operands = {paramBuffer(update.getHistoryAttr())};
  } else if (auto counter = dyn_cast<ExpertLoadOp>(op)) {
    inst.operands = {valueBuffers.lookup(counter.getIndices()),
                     paramBuffer(counter.getLoadAttr())};
  } else if (auto update = dyn_cast<ExpertLoadUpdateOp>(op)) {
    if (!updated.insert({update.getLoadAttr(), 0}).second)
      return update.emitOpError() << "updates " << update.getLoadAttr()
                                  << " a second time in one step";
    inst.operands = {paramBuffer(update.getLoadAttr())};
    if (FlatSymbolRefAttr bias = update.getBiasAttr())
      inst.operands.push_back(paramBuffer(bias));
  } else {
    for (Value operand : op->getOperands())
      inst.operands.push_back(valueBuffers.lookup(operand));
    // Delayed FP8 scaling's amax history follows the weights.
    if (auto history = op->getAttrOfType<FlatSymbolRefAttr>("fp8_history"))
      inst.operands.push_back(paramBuffer(history));
  }
  inst.location = locationString(op->getLoc());
  return inst;
}

LogicalResult ArtifactBuilder::addInstruction(Operation *op) {
  if (auto read = dyn_cast<GetParamOp>(op)) {
    valueBuffers[read.getResult()] = paramBuffer(read.getParamAttr());
    return success();
  }
  auto offsets = op->getAttrOfType<DenseI64ArrayAttr>(kOffsetsAttrName);
  if (op->getNumResults() > 0 &&
      (!offsets || offsets.size() != static_cast<int64_t>(op->getNumResults())))
    return op->emitOpError() << "has no memory plan (run moe-plan-memory)";
  FailureOr<PendingInstruction> inst = encode(op);
  if (failed(inst) || (schedule && failed(addPipelineTags(op, *inst))))
    return failure();
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    std::string name = (op->getName().stripDialect() + "." +
                        Twine(instructions.size()) + "." + Twine(i))
                           .str();
    FailureOr<fb::DType> dtype = dtypeOf(result);
    if (failed(dtype))
      return failure();
    uint32_t index = addBuffer(name, fb::BufferKind::Temporary, *dtype,
                               cast<ShapedType>(result.getType()).getShape(),
                               offsets[i]);
    valueBuffers[result] = index;
    inst->results.push_back(index);
  }
  instructions.push_back(std::move(*inst));
  return success();
}

LogicalResult ArtifactBuilder::addPipelineTags(Operation *op,
                                               PendingInstruction &inst) {
  auto stage = op->getAttrOfType<IntegerAttr>(kPipelineStageAttrName);
  auto phase = op->getAttrOfType<StringAttr>(kPipelinePhaseAttrName);
  if (!stage || !phase)
    return op->emitOpError()
           << "has no pipeline stage (run moe-split-pipeline-stages)";
  inst.stage = static_cast<int32_t>(stage.getInt());
  std::optional<fb::PipelinePhase> value =
      llvm::StringSwitch<std::optional<fb::PipelinePhase>>(phase.getValue())
          .Case("forward", fb::PipelinePhase::Forward)
          .Case("backward", fb::PipelinePhase::Backward)
          .Case("weight", fb::PipelinePhase::BackwardWeight)
          .Case("optimizer", fb::PipelinePhase::Optimizer)
          .Default(std::nullopt);
  if (!value)
    return op->emitOpError() << "has an unknown pipeline phase " << phase;
  inst.phase = *value;
  int64_t stages = schedule->stages * schedule->virtualStages;
  if (inst.stage < -1 || inst.stage >= stages)
    return op->emitOpError() << "runs on pipeline stage " << inst.stage
                             << ", but the schedule has " << stages;
  return success();
}

static fb::PipelineActionKind toSchema(::moe::pipeline::ActionKind kind) {
  switch (kind) {
  case ::moe::pipeline::ActionKind::Forward:
    return fb::PipelineActionKind::Forward;
  case ::moe::pipeline::ActionKind::BackwardInput:
    return fb::PipelineActionKind::BackwardInput;
  case ::moe::pipeline::ActionKind::BackwardWeight:
    return fb::PipelineActionKind::BackwardWeight;
  case ::moe::pipeline::ActionKind::Backward:
    return fb::PipelineActionKind::Backward;
  }
  llvm_unreachable("unknown action kind");
}

flatbuffers::Offset<fb::Pipeline> ArtifactBuilder::pipelineOffset() {
  std::vector<int32_t> stages;
  std::vector<fb::PipelinePhase> phases;
  for (const PendingInstruction &inst : instructions) {
    stages.push_back(inst.stage);
    phases.push_back(inst.phase);
  }
  std::vector<flatbuffers::Offset<fb::PipelineRank>> ranks;
  for (const std::vector<::moe::pipeline::Action> &actions : schedule->ranks) {
    std::vector<fb::PipelineAction> encoded;
    for (const ::moe::pipeline::Action &action : actions)
      encoded.emplace_back(toSchema(action.kind), action.chunk,
                           action.microbatch);
    ranks.push_back(
        fb::CreatePipelineRank(fbb, fbb.CreateVectorOfStructs(encoded)));
  }
  auto stageVec = fbb.CreateVector(stages);
  auto phaseVec = fbb.CreateVector(phases);
  auto rankVec = fbb.CreateVector(ranks);
  return fb::CreatePipeline(fbb, schedule->stages, schedule->virtualStages,
                            schedule->microbatches,
                            fbb.CreateString(toString(schedule->kind)),
                            stageVec, phaseVec, rankVec);
}

LogicalResult ArtifactBuilder::build(uint64_t seed, StringRef target,
                                     llvm::raw_ostream &os) {
  Block &body = step.getBody().front();
  if (failed(verifyStepSignature()))
    return failure();
  auto arena = step->getAttrOfType<IntegerAttr>(kArenaBytesAttrName);
  if (!arena)
    return step.emitOpError() << "has no memory plan (run moe-plan-memory)";
  if (failed(addParams()))
    return failure();
  // tokens, targets, [positions,] step.
  bool documents = body.getNumArguments() == 4;
  const char *inputNames[] = {"tokens", "targets",
                              documents ? "positions" : "step", "step"};
  uint32_t inputs[4];
  for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
    // verifyStepSignature checked they are i32.
    inputs[i] = addBuffer(inputNames[i], fb::BufferKind::Input,
                          toSchema(::moe::rt::DType::I32),
                          cast<ShapedType>(arg.getType()).getShape());
    valueBuffers[arg] = inputs[i];
  }
  uint32_t stepInput = inputs[body.getNumArguments() - 1];
  int64_t positionsInput = documents ? int64_t(inputs[2]) : -1;
  for (Operation &op : body.without_terminator())
    if (failed(addInstruction(&op)))
      return failure();
  Operation *terminator = body.getTerminator();
  uint32_t outputs[3];
  for (auto [i, value] : llvm::enumerate(terminator->getOperands()))
    outputs[i] = valueBuffers.lookup(value);

  std::vector<flatbuffers::Offset<fb::Instruction>> instOffsets;
  for (const PendingInstruction &inst : instructions) {
    auto ops = fbb.CreateVector(std::vector<uint32_t>(inst.operands.begin(),
                                                      inst.operands.end()));
    auto res = fbb.CreateVector(std::vector<uint32_t>(inst.results.begin(),
                                                      inst.results.end()));
    auto ints = fbb.CreateVector(
        std::vector<int64_t>(inst.ints.begin(), inst.ints.end()));
    auto floats = fbb.CreateVector(
        std::vector<float>(inst.floats.begin(), inst.floats.end()));
    auto loc = fbb.CreateString(inst.location);
    instOffsets.push_back(fb::CreateInstruction(
        fbb, static_cast<fb::Opcode>(inst.opcode), ops, res, ints, floats,
        loc));
  }
  std::vector<::moe::rt::Opcode> opcodes;
  for (const PendingInstruction &inst : instructions)
    opcodes.push_back(inst.opcode);
  auto opcodeVec =
      fbb.CreateVector(::moe::rt::artifact::writeOpcodeEntries(fbb, opcodes));

  ModelStatistics stats = computeModelStatistics(module, step);
  auto model = fb::CreateModelInfo(
      fbb, fbb.CreateString(stats.name), stats.vocab, stats.hidden,
      stats.layers, stats.heads, stats.kvHeads, stats.experts, stats.topK,
      stats.ffn, stats.batch, stats.seq, stats.totalParams,
      stats.activeParams,
      stats.flopsPerStep * (schedule ? schedule->microbatches : 1),
      fbb.CreateString(configJson(module, step)));
  // The mesh, the collectives' groups and the batch split (version 1.1);
  // pipeline stages are the outermost axis, "pp" (version 1.2).
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>>
      meshAxes, batchAxes;
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> meshShape;
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Axes>>>
      groupVec;
  std::vector<flatbuffers::Offset<flatbuffers::String>> axisNames;
  std::vector<int64_t> axisSizes;
  if (schedule && schedule->stages > 1) {
    axisNames.push_back(fbb.CreateString("pp"));
    axisSizes.push_back(schedule->stages);
  }
  MeshOp mesh = getMesh(module);
  if (mesh) {
    for (StringRef axis : mesh.getAxes().getAsValueRange<StringAttr>())
      axisNames.push_back(fbb.CreateString(axis.str()));
    llvm::append_range(axisSizes, mesh.getShape());
  }
  if (!axisNames.empty()) {
    meshAxes = fbb.CreateVector(axisNames);
    meshShape = fbb.CreateVector(axisSizes);
    std::vector<flatbuffers::Offset<fb::Axes>> groupOffsets;
    for (const SmallVector<StringRef> &group : groups)
      groupOffsets.push_back(axesOffset(group));
    groupVec = fbb.CreateVector(groupOffsets);
    std::vector<flatbuffers::Offset<flatbuffers::String>> batch;
    if (ShardingAttr tokens =
            mesh ? getRecordedSharding(body.getArgument(0)) : ShardingAttr())
      for (StringRef axis : tokens.axesOf(0))
        batch.push_back(fbb.CreateString(axis.str()));
    batchAxes = fbb.CreateVector(batch);
  }
  flatbuffers::Offset<fb::Pipeline> pipeline;
  if (schedule)
    pipeline = pipelineOffset();
  auto bufferVec = fbb.CreateVector(buffers);
  auto instVec = fbb.CreateVector(instOffsets);
  auto producer = fbb.CreateString("moec");
  auto targetName = fbb.CreateString(target.str());
  auto program = fb::CreateProgram(
      fbb, ::moe::rt::kArtifactVersionMajor, ::moe::rt::kArtifactVersionMinor,
      producer, model, bufferVec, instVec, arena.getInt(), inputs[0], inputs[1],
      stepInput, outputs[0], outputs[1], outputs[2], seed, meshAxes, meshShape,
      groupVec, batchAxes, pipeline, opcodeVec, targetName, positionsInput);
  fb::FinishProgramBuffer(fbb, program);
  os.write(reinterpret_cast<const char *>(fbb.GetBufferPointer()),
           fbb.GetSize());
  std::array<uint8_t, ::moe::rt::artifact::kSealSize> seal =
      ::moe::rt::artifact::sealFor(fbb.GetBufferPointer(), fbb.GetSize());
  os.write(reinterpret_cast<const char *>(seal.data()), seal.size());
  return success();
}

LogicalResult
mlir::moe::writeArtifact(ModuleOp module, StringRef function, uint64_t seed,
                         llvm::raw_ostream &os,
                         const ::moe::pipeline::Schedule *schedule,
                         StringRef target) {
  FailureOr<func::FuncOp> step =
      lookupFunction(module, function, "to write as the training step");
  if (failed(step))
    return failure();
  return ArtifactBuilder(module, *step, schedule).build(seed, target, os);
}
