//===- Capabilities.cpp - refusing what a backend cannot run --------------===//
//
// Runs before the backend opens anything, so that a GPU-less machine, a
// wrong GPU or a missing kernel all answer the same way: the capability's
// name, what the artifact needs of it and what the backend has.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Artifact/Capabilities.h"
#include "moe/Runtime/Capabilities.h"

#include "VerifierSupport.h"
#include "moe/Runtime/Artifact/ExpertsRecipe.h"
#include "moe/Runtime/Artifact/OpViews.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace moe::rt {

namespace {

using caps::Capabilities;
using caps::Fp8Recipe;
using verifier::describeBuffer;
using verifier::dtypeName;

/// This Abseil's string_view is its own, not std::string_view.
std::string str(std::string_view view) { return std::string(view); }

/// The backend's targets: "a100, h100, h200".
std::string targetsOf(std::string_view backend) {
  std::string list;
  for (const Capabilities &record : caps::kCapabilities)
    if (record.backend == backend)
      absl::StrAppend(&list, list.empty() ? "" : ", ", str(record.target));
  return list;
}

/// What the program's pipeline needs that the backend lacks: the
/// capability and "2 pipeline stages" / "4 microbatches"; none if nothing.
std::optional<std::pair<std::string_view, std::string>>
pipelineNeed(const Program &program, const Capabilities &record) {
  const Pipeline &pipeline = program.pipeline;
  if (!pipeline.enabled())
    return std::nullopt;
  if (pipeline.modelStages() > 1 && !record.pipelineStages)
    return std::pair{caps::kPipelineStagesName,
                     pipeline.virtualStages > 1
                         ? absl::StrCat(pipeline.stages, " pipeline stages x ",
                                        pipeline.virtualStages, " virtual")
                         : absl::StrCat(pipeline.stages, " pipeline stages")};
  if (!record.microbatches)
    return std::pair{caps::kMicrobatchesName,
                     absl::StrCat(pipeline.microbatches, " microbatches")};
  return std::nullopt;
}

/// The refusals of one check: "<origin> needs <what>; the cuda backend on
/// a100 lacks it (<capability>: <what it has>)". An artifact of another
/// backend's target (a cpu-target one on cuda) is checked against what the
/// backend runs on every one of its targets, and says so.
class Refusal {
public:
  Refusal(const std::string &origin, std::string_view backend,
          const Capabilities &record, const std::string &target)
      : origin(origin), backend(backend), record(record), target(target) {}

  absl::Status operator()(const std::string &needs, std::string_view capability,
                          const std::string &has) const {
    if (!record.target.empty())
      return absl::FailedPreconditionError(absl::StrCat(
          origin, " needs ", needs, "; the ", str(backend), " backend on ",
          str(record.target), " lacks it (", str(capability), ": ", has, ")"));
    return absl::FailedPreconditionError(absl::StrCat(
        origin, " needs ", needs, "; the ", str(backend),
        " backend lacks it for target ", target, " (", str(capability),
        " on all of ", targetsOf(backend), ": ", has, ")"));
  }

private:
  const std::string &origin;
  std::string_view backend;
  const Capabilities &record;
  const std::string &target;
};

/// The FP8 recipe, widths and dispatch of the expert instructions.
absl::Status checkExperts(const Program &program, const Capabilities &record,
                          const Refusal &lacks) {
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    std::optional<ops::ExpertsRecipe> recipe = ops::expertsRecipeOf(inst);
    if (!recipe || !recipe->fp8Scaling)
      continue;
    std::string at = describeInstruction(program, i);
    if (*recipe->fp8Scaling != Fp8Recipe::None) {
      if (!record.hasRecipe(*recipe->fp8Scaling))
        return lacks(absl::StrCat("fp8 recipe ",
                                  str(caps::fp8RecipeName(*recipe->fp8Scaling)),
                                  " (", at, ")"),
                     caps::kFp8RecipesName, caps::recipeList(record));
      if (*recipe->fp8Scaling == Fp8Recipe::Blockwise &&
          !record.runsFp8Block(recipe->fp8Block))
        return lacks(
            absl::StrCat("fp8 blocks of ", recipe->fp8Block, " (", at, ")"),
            caps::kFp8BlockName, std::to_string(record.fp8Block));
      // w1 is [experts, ffn, hidden].
      const std::vector<int64_t> &w1 =
          program.buffers[inst.operands[recipe->firstOperand + 3]].shape;
      int64_t align = record.fp8GemmAlignment;
      if (w1.size() == 3 && (w1[1] % align != 0 || w1[2] % align != 0))
        return lacks(absl::StrCat("fp8 GEMMs of hidden ", w1[2], " and ffn ",
                                  w1[1], " (", at, ")"),
                     caps::kFp8GemmAlignmentName,
                     absl::StrCat("multiples of ", align));
    }
    // Only an expert-parallel instruction (it carries its group) sends
    // tokens anywhere.
    if (recipe->fp8Dispatch && recipe->group && !record.fp8Dispatch)
      return lacks(absl::StrCat("fp8 token dispatch (", at, ")"),
                   caps::kFp8DispatchName, "no");
  }
  return absl::OkStatus();
}

/// Opcodes a backend runs only with one yes/no capability: the fused
/// instructions the compiler forms only where the backend runs them
/// (moe-fuse-linear-cross-entropy, moe-fuse-gemm-epilogues), and the
/// routers, router losses, latent attention and parameters shared by
/// pipeline stages only the CPU runs. Checked
/// in this order, so a program's first refusal is always the same.
struct GatedOpcodes {
  std::vector<Opcode> opcodes;
  bool Capabilities::*capability;
  std::string_view name;
  const char *what;
};

const std::vector<GatedOpcodes> &gatedOpcodes() {
  static const std::vector<GatedOpcodes> gated = {
      {{Opcode::LinearCrossEntropy, Opcode::LinearCrossEntropyGrad},
       &Capabilities::linearCrossEntropy,
       caps::kLinearCrossEntropyName,
       "the LM head fused with its loss"},
      {{Opcode::LinearAccumulate, Opcode::LinearGradInputAccumulate},
       &Capabilities::gemmEpilogues,
       caps::kGemmEpiloguesName,
       "a GEMM adding to an addend"},
      {{Opcode::ScoredRouter, Opcode::ScoredRouterGrad},
       &Capabilities::scoredRouters,
       caps::kScoredRoutersName,
       "a router other than Mixtral's"},
      {{Opcode::AttentionValueDim, Opcode::AttentionValueDimGrad,
        Opcode::ConcatHeads, Opcode::SplitHeads},
       &Capabilities::latentAttention,
       caps::kLatentAttentionName,
       "multi-head latent attention"},
      {{Opcode::SequenceAuxLoss, Opcode::SequenceAuxLossGrad, Opcode::ZLoss,
        Opcode::ZLossGrad},
       &Capabilities::routerLosses,
       caps::kRouterLossesName,
       "a sequence-wise or z router loss"},
      {{Opcode::ExpertLoad, Opcode::ExpertLoadUpdate},
       &Capabilities::scoredRouters,
       caps::kScoredRoutersName,
       "per-expert load counters"},
      {{Opcode::PipelineGradientSum},
       &Capabilities::stageSharedParameters,
       caps::kStageSharedParametersName,
       "a parameter two pipeline stages hold"},
      {{Opcode::DocumentRope, Opcode::DocumentRopeGrad,
        Opcode::DocumentAttention, Opcode::DocumentAttentionGrad},
       &Capabilities::documentMasking,
       caps::kDocumentMaskingName,
       "document masking"},
      {{Opcode::RingAttention, Opcode::RingAttentionGrad},
       &Capabilities::contextParallel,
       caps::kContextParallelName,
       "ring attention over a split sequence"},
      {{Opcode::ShardedAdamW},
       &Capabilities::shardedOptimizer,
       caps::kShardedOptimizerName,
       "ZeRO-1's optimizer state split over the data ranks"}};
  return gated;
}

/// Whether an opcode's view has a sequence group (context parallelism).
template <class View, class = void> struct HasSequence : std::false_type {};
template <class View>
struct HasSequence<View,
                   std::void_t<decltype(std::declval<const View &>().sequence())>>
    : std::true_type {};

/// The backend of ops::dispatch that reads an instruction's sequence group,
/// where its opcode has one.
struct SequenceGroupOf {
  template <class View> std::optional<int64_t> run(const View &op) {
    if constexpr (HasSequence<View>::value)
      return op.sequence();
    return std::nullopt;
  }
  std::optional<int64_t> unknownOpcode(const Instruction &) {
    return std::nullopt;
  }
};

/// Whether an opcode's view has scaled RoPE's or a softmax scale factor's
/// attributes.
template <class View, class = void> struct HasRopeScaling : std::false_type {};
template <class View>
struct HasRopeScaling<View,
                      std::void_t<decltype(std::declval<const View &>().scaling())>>
    : std::true_type {};
template <class View, class = void> struct HasScaleFactor : std::false_type {};
template <class View>
struct HasScaleFactor<
    View, std::void_t<decltype(std::declval<const View &>().scaleFactor())>>
    : std::true_type {};

/// The backend of ops::dispatch that tells whether an instruction scales
/// RoPE or the softmax: "scaled RoPE" or "a softmax scale factor", or
/// nothing.
struct ScaledRopeOf {
  template <class View> const char *run(const View &op) {
    if constexpr (HasRopeScaling<View>::value)
      if (op.scaling())
        return "scaled RoPE";
    if constexpr (HasScaleFactor<View>::value)
      if (op.scaleFactor())
        return "an attention softmax scale factor (YaRN's mscale_all_dim)";
    return nullptr;
  }
  const char *unknownOpcode(const Instruction &) { return nullptr; }
};

absl::Status checkScaledRope(const Program &program, const Capabilities &record,
                             const Refusal &lacks) {
  if (record.scaledRope)
    return absl::OkStatus();
  for (size_t i = 0; i < program.instructions.size(); ++i)
    if (ScaledRopeOf reader;
        const char *what = ops::dispatch(reader, program.instructions[i]))
      return lacks(absl::StrCat(what, " (", describeInstruction(program, i),
                                ")"),
                   caps::kScaledRopeName, "no");
  return absl::OkStatus();
}

absl::Status checkGatedOps(const Program &program, const Capabilities &record,
                           const Refusal &lacks) {
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    Opcode opcode = program.instructions[i].opcode;
    for (const GatedOpcodes &gate : gatedOpcodes())
      if (!(record.*gate.capability) &&
          std::find(gate.opcodes.begin(), gate.opcodes.end(), opcode) !=
              gate.opcodes.end())
        return lacks(
            absl::StrCat(gate.what, " (", describeInstruction(program, i), ")"),
            gate.name, "no");
  }
  return absl::OkStatus();
}

} // namespace

absl::Status checkCapabilities(const Program &program,
                               const std::string &origin,
                               std::string_view backend,
                               const RunRequest &request) {
  bool known = false;
  std::string backends;
  for (std::string_view name : caps::kBackends) {
    known = known || name == backend;
    absl::StrAppend(&backends, backends.empty() ? "" : ", ", str(name));
  }
  if (!known)
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown backend '", str(backend), "'; known backends: ", backends));
  Capabilities record = caps::backendCapabilities(backend, program.target);
  Refusal lacks(origin, backend, record, program.target);

  for (uint32_t b = 0; b < program.buffers.size(); ++b)
    if (!record.hasDtype(program.buffers[b].dtype))
      return lacks(absl::StrCat("dtype ", dtypeName(program.buffers[b].dtype),
                                " (", describeBuffer(program, b), ")"),
                   caps::kDtypesName, caps::dtypeList(record));
  if (auto need = pipelineNeed(program, record))
    return lacks(need->second, need->first, "no");
  if (absl::Status s = checkExperts(program, record, lacks); !s.ok())
    return s;
  if (absl::Status s = checkGatedOps(program, record, lacks); !s.ok())
    return s;
  if (absl::Status s = checkScaledRope(program, record, lacks); !s.ok())
    return s;
  if (!record.contextParallel) {
    for (size_t g = 0; g < program.groups.size(); ++g)
      if (program.balancedSplitOf(program.groups[g]) > 1)
        return lacks(absl::StrCat("a sequence split over cp (context "
                                  "parallelism, group ",
                                  g, ")"),
                     caps::kContextParallelName, "no");
    // A block of a sequence split over any group is refused too: the
    // backend's RoPE and attention would read it as the whole.
    for (size_t i = 0; i < program.instructions.size(); ++i)
      if (SequenceGroupOf reader;
          ops::dispatch(reader, program.instructions[i]))
        return lacks(absl::StrCat("a block of a split sequence (",
                                  describeInstruction(program, i), ")"),
                     caps::kContextParallelName, "no");
  }

  // Run options the backend would otherwise ignore.
  if (request.expertChunks > 1 && !record.expertChunks)
    return lacks(absl::StrCat("--expert-chunks ", request.expertChunks),
                 caps::kExpertChunksName, "no");
  if (request.asyncCollectives && !record.asyncCollectives)
    return lacks("--async-collectives", caps::kAsyncCollectivesName, "no");
  return absl::OkStatus();
}

} // namespace moe::rt
