//===- InstructionRules.cpp - the checks of one instruction ---------------===//
//
// The op table (Artifact/OpTable.td) defines each opcode's layout: operand
// and result counts and dtypes, attribute counts and kinds, shape patterns
// and attribute constraints; the checks it generates (OpVerifier.inc) are
// included below. This file holds the generic half (counts, indices,
// dtypes, attribute kinds) and the rules the table names by hand-written
// function. Everything the executor derives from a buffer's shape (T, K, N,
// heads, ...) is checked, so the kernels can index without bounds checks.
//
//===----------------------------------------------------------------------===//

#include "ShapePattern.h"
#include "VerifierSupport.h"

#include "moe/Runtime/Artifact/OpTable.h"
#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/HeadParts.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace moe::rt::verifier {
namespace {

/// The most elements one collective may move: MPI counts are ints.
constexpr int64_t kMaxCollectiveElements = std::numeric_limits<int32_t>::max();

std::string plural(size_t count, const char *noun) {
  return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
}

/// "f32 or i32".
std::string dtypeList(uint32_t dtypes) {
  std::vector<std::string> names;
  for (uint32_t d = 0; d < 32; ++d)
    if (dtypes & (1u << d))
      names.push_back(dtypeName(static_cast<DType>(d)));
  return absl::StrJoin(names, " or ");
}

/// "none (0), tensorwise (1) or delayed (3)".
std::string enumList(const ops::EnumInfo &info) {
  std::string text;
  for (size_t i = 0; i < info.numCases; ++i)
    absl::StrAppend(&text, i == 0 ? "" : i + 1 == info.numCases ? " or " : ", ",
                    info.cases[i].name, " (", info.cases[i].value, ")");
  return text;
}

enum class Role { Operand, Result };

class InstructionChecker {
public:
  InstructionChecker(const Program &program, size_t index)
      : program(program), index(index),
        instruction(program.instructions[index]) {}

  absl::Status check() {
    if (static_cast<size_t>(instruction.opcode) >=
        static_cast<size_t>(kNumOpcodes))
      return error(absl::StrCat("unknown opcode ",
                                static_cast<int>(instruction.opcode)));
    info = &ops::opInfo(instruction.opcode);
    MOE_VERIFY_OK(checkCounts());
    MOE_VERIFY_OK(checkBuffers());
    MOE_VERIFY_OK(checkAttrCounts());
    MOE_VERIFY_OK(checkAttrKinds());
    return checkOpcode();
  }

private:
  absl::Status error(absl::string_view message) const {
    return instructionError(program, index, message);
  }

  const std::vector<uint32_t> &indices(Role role) const {
    return role == Role::Operand ? instruction.operands : instruction.results;
  }
  static const char *roleName(Role role) {
    return role == Role::Operand ? "operand" : "result";
  }
  const Buffer &buffer(Role role, size_t i) const {
    return program.buffers[indices(role)[i]];
  }
  const Buffer &operand(size_t i) const { return buffer(Role::Operand, i); }

  /// Operand and result counts.
  absl::Status checkCounts() {
    size_t fixed = 0;
    bool optional = false, variadic = false;
    for (size_t i = 0; i < info->numOperands; ++i) {
      optional |= info->operands[i].optional;
      variadic |= info->operands[i].variadic;
      fixed += !info->operands[i].optional;
    }
    size_t operands = instruction.operands.size();
    size_t most = optional ? fixed + 1 : fixed;
    if (operands < fixed || (!variadic && operands > most)) {
      std::string expected = variadic          ? absl::StrCat("at least ", fixed)
                             : fixed == most ? absl::StrCat(fixed)
                                             : absl::StrCat(fixed, " or ", most);
      return error(
          absl::StrCat("expected ", expected, " operands, found ", operands));
    }
    // Results are all fixed, or the last is variadic (one or more).
    bool variadicResults =
        info->numResults > 0 && info->results[info->numResults - 1].variadic;
    size_t results = instruction.results.size();
    if (variadicResults ? results < info->numResults
                        : results != info->numResults)
      return error(absl::StrCat("expected ", variadicResults ? "at least " : "",
                                plural(info->numResults, "result"), ", found ",
                                results));
    return absl::OkStatus();
  }

  const ops::ValueInfo &valueInfo(Role role, size_t i) const {
    if (role == Role::Result)
      return info->results[std::min(i, info->numResults - 1)];
    // A variadic operand's entry covers every operand from it on.
    return info->operands[std::min(i, info->numOperands - 1)];
  }

  /// Index ranges and dtypes.
  absl::Status checkBuffers() {
    for (Role role : {Role::Operand, Role::Result}) {
      for (size_t i = 0; i < indices(role).size(); ++i) {
        uint32_t index = indices(role)[i];
        if (index >= program.buffers.size())
          return error(absl::StrCat(roleName(role), " ", i, ": buffer index ",
                                    index, " is out of range (",
                                    program.buffers.size(), " buffers)"));
      }
      for (size_t i = 0; i < indices(role).size(); ++i) {
        const ops::ValueInfo &value = valueInfo(role, i);
        DType actual = buffer(role, i).dtype;
        uint32_t expected = value.dtypes;
        // Gathers and slices move ids too: the result has the operand's.
        if (value.dtypeOf >= 0)
          expected = ops::dtypeBit(operand(value.dtypeOf).dtype);
        if (!(ops::dtypeBit(actual) & expected))
          return error(absl::StrCat(roleName(role), " ", i, " (",
                                    describeBuffer(program, indices(role)[i]),
                                    ") has dtype ", dtypeName(actual),
                                    ", expected ", dtypeList(expected)));
      }
    }
    return absl::OkStatus();
  }

  /// The attribute counts select one of the opcode's layouts.
  absl::Status checkAttrCounts() {
    std::optional<const ops::AttrLayout *> found =
        ops::findAttrLayout(instruction);
    if (found) {
      layout = *found;
      return absl::OkStatus();
    }
    for (bool floats : {false, true}) {
      size_t count =
          floats ? instruction.floatAttrs.size() : instruction.intAttrs.size();
      if (countAllowed(floats, count))
        continue;
      return error(expectedAttrs(floats, count));
    }
    return error("unexpected attribute counts");
  }

  bool countAllowed(bool floats, size_t count) const {
    for (size_t l = 0; l < info->numLayouts; ++l) {
      int expected = floats ? info->layouts[l].floats : info->layouts[l].ints;
      if (expected < 0 ? count == instruction.operands.size()
                       : count == static_cast<size_t>(expected))
        return true;
    }
    return info->numLayouts == 0 && count == 0;
  }

  /// "expected 2 int attributes [group, dim], found 1", naming the
  /// optional ones too.
  std::string expectedAttrs(bool floats, size_t found) const {
    const char *kind = floats ? "float" : "int";
    std::vector<std::string> fixed;
    std::vector<std::vector<std::string>> sets;
    for (size_t a = 0; a < info->numAttrs; ++a) {
      const ops::AttrInfo &attr = info->attrs[a];
      if (attr.inFloats() != floats)
        continue;
      if (attr.perOperand) {
        size_t operands = instruction.operands.size();
        if (attr.optionalSet >= 0)
          return absl::StrCat("expected no ", kind, " attributes or one ",
                              attr.name, " per operand (", operands,
                              "), found ", found);
        return absl::StrCat("expected one ", kind, " attribute (", attr.name,
                            ") per operand: ", plural(operands, "operand"),
                            ", ", plural(found, absl::StrCat(kind, " attribute").c_str()));
      }
      if (attr.optionalSet < 0) {
        fixed.push_back(attr.name);
        continue;
      }
      if (sets.size() <= static_cast<size_t>(attr.optionalSet))
        sets.resize(attr.optionalSet + 1);
      sets[attr.optionalSet].push_back(attr.name);
    }
    std::string text =
        absl::StrCat("expected ",
                     plural(fixed.size(), absl::StrCat(kind, " attribute").c_str()),
                     " [", absl::StrJoin(fixed, ", "), "]");
    for (const std::vector<std::string> &set : sets)
      if (!set.empty())
        absl::StrAppend(&text, " and optionally [", absl::StrJoin(set, ", "),
                        "]");
    return absl::StrCat(text, ", found ", found);
  }

  /// Values of the attribute's kind: finite floats, bools, enum cases and
  /// group indices.
  absl::Status checkAttrKinds() {
    int64_t groups = static_cast<int64_t>(program.groups.size());
    std::string groupRange = absl::StrCat("a group index in [0, ", groups, ")");
    for (size_t a = 0; a < info->numAttrs; ++a) {
      const ops::AttrInfo &attr = info->attrs[a];
      if (layout->slots[a] < 0)
        continue;
      size_t first = layout->slots[a], count = 1;
      if (attr.perOperand)
        count = attr.inFloats() ? instruction.floatAttrs.size()
                                : instruction.intAttrs.size();
      for (size_t slot = first; slot < first + count; ++slot) {
        if (attr.inFloats()) {
          float value = instruction.floatAttrs[slot];
          if (!std::isfinite(value))
            return error(absl::StrCat("float attribute ", slot, " (",
                                      attr.name, ") is not finite (", value,
                                      ")"));
          continue;
        }
        int64_t value = instruction.intAttrs[slot];
        switch (attr.kind) {
        case ops::AttrKind::Bool:
          MOE_VERIFY_OK(requireSlot(a, slot, value == 0 || value == 1,
                                    "must be 0 or 1"));
          break;
        case ops::AttrKind::Enum:
          MOE_VERIFY_OK(requireSlot(
              a, slot, ops::enumCaseName(*attr.enumInfo, value) != nullptr,
              absl::StrCat("must be ", enumList(*attr.enumInfo))));
          break;
        case ops::AttrKind::Group:
          MOE_VERIFY_OK(requireSlot(a, slot, value >= 0 && value < groups,
                                    absl::StrCat("must be ", groupRange)));
          break;
        case ops::AttrKind::GroupOrNone:
          MOE_VERIFY_OK(requireSlot(
              a, slot, value == -1 || (value >= 0 && value < groups),
              absl::StrCat("must be -1 (not split) or ", groupRange)));
          break;
        default:
          break;
        }
      }
    }
    return absl::OkStatus();
  }

  /// Checks the value in `slot` of attribute `attr` (an index into the
  /// opcode's attributes); `requirement` reads "must be >= 1".
  absl::Status requireSlot(size_t attr, size_t slot, bool ok,
                           absl::string_view requirement) {
    if (ok)
      return absl::OkStatus();
    const ops::AttrInfo &attrInfo = info->attrs[attr];
    std::string found =
        attrInfo.inFloats() ? absl::StrCat(instruction.floatAttrs[slot])
                            : absl::StrCat(instruction.intAttrs[slot]);
    if (attrInfo.kind == ops::AttrKind::Enum)
      if (const char *name =
              ops::enumCaseName(*attrInfo.enumInfo, instruction.intAttrs[slot]))
        found = absl::StrCat(name, " (", found, ")");
    return error(absl::StrCat(attrInfo.inFloats() ? "float" : "int",
                              " attribute ", slot, " (", attrInfo.name, ") ",
                              requirement, ", found ", found));
  }
  absl::Status requireAttr(size_t attr, bool ok,
                           absl::string_view requirement) {
    return requireSlot(attr, layout->slots[attr], ok, requirement);
  }

  /// The generated checkOpcode(): attribute constraints and shapes.
#include "moe/Runtime/Artifact/OpVerifier.inc"

  absl::Status shape(Role role, size_t i, const ShapePattern &pattern) {
    std::string expected;
    const Buffer &actual = buffer(role, i);
    if (shapes.match(actual.shape, pattern, expected))
      return absl::OkStatus();
    return error(absl::StrCat(roleName(role), " ", i, " has shape ",
                              formatShape(actual.shape), ", expected ",
                              expected, " (",
                              describeBuffer(program, indices(role)[i]), ")"));
  }
  absl::Status operandShape(size_t i, const ShapePattern &pattern) {
    return shape(Role::Operand, i, pattern);
  }
  absl::Status resultShape(size_t i, const ShapePattern &pattern) {
    return shape(Role::Result, i, pattern);
  }
  int64_t bound(const char *symbol) const { return *shapes.lookup(symbol); }

  absl::Status requireKind(size_t operandIndex, BufferKind kind) {
    const Buffer &actual = operand(operandIndex);
    if (actual.kind == kind)
      return absl::OkStatus();
    return error(absl::StrCat(
        "operand ", operandIndex, " (",
        describeBuffer(program, instruction.operands[operandIndex]),
        ") must be ", withArticle(kind), ", found ", withArticle(actual.kind)));
  }

  // The rules OpTable.td names, one overload or template per use.

  /// top_k against the expert count E bound by the shapes.
  template <class View> absl::Status checkTopK(const View &op) {
    int64_t experts = bound("E");
    return requireAttr(View::kTopKAttr, op.topK() >= 1 && op.topK() <= experts,
                       absl::StrCat("must be in [1, E] with E = ", experts));
  }

  /// groups divides E with two or more experts each when several (a group
  /// scores its two best), and the top_groups best hold top_k experts.
  template <class View> absl::Status checkRoutingGroups(const View &op) {
    int64_t experts = bound("E"), groups = op.groups();
    MOE_VERIFY_OK(requireAttr(
        View::kGroupsAttr,
        experts % groups == 0 && (groups == 1 || experts / groups >= 2),
        absl::StrCat("must divide E = ", experts,
                     " into groups of at least 2 experts")));
    return requireAttr(View::kTopGroupsAttr,
                       op.topGroups() <= groups &&
                           op.topGroups() * (experts / groups) >= op.topK(),
                       absl::StrCat("must be <= groups (", groups,
                                    ") and its groups hold "
                                    "top_k (",
                                    op.topK(), ") experts"));
  }

  /// X is heads heads of the weight's D features.
  template <class View> absl::Status checkHeadWidth(const View &op) {
    int64_t width = bound("X"), features = bound("D");
    if (width != op.heads() * features)
      return error(absl::StrCat("last dim ", width, " is not heads (",
                                op.heads(), ") * the weight's ", features,
                                " features"));
    return absl::OkStatus();
  }

  /// The slots per token K of a sequence-wise loss against the experts.
  template <class View> absl::Status checkSlots(const View &) {
    int64_t slots = bound("K"), experts = bound("E");
    if (slots < 1 || slots > experts)
      return error(
          absl::StrCat("indices have ", slots,
                       " slots per token, expected 1 to E = ", experts));
    return absl::OkStatus();
  }

  template <class View> absl::Status checkRopeWidth(const View &op) {
    if (absl::StatusOr<int64_t> length = sequenceLength(op); !length.ok())
      return length.status();
    int64_t width = bound("X"), heads = op.heads();
    if (width % heads != 0 || (width / heads) % 2 != 0 || width == 0)
      return error(absl::StrCat("operand 0 has last dim ", width,
                                ", expected heads (", heads,
                                ") * an even, positive head dim"));
    return absl::OkStatus();
  }

  /// Scaled RoPE's parameters are the ones its kind reads, each in the
  /// range HF's formulas are defined on (docs/semantics.md).
  template <class View> absl::Status checkRopeScaling(const View &op) {
    std::optional<RopeScaling> kind = op.scaling();
    if (!kind)
      return absl::OkStatus();
    MOE_VERIFY_OK(requireAttr(View::kFactorAttr,
                              std::isfinite(*op.factor()) && *op.factor() >= 1,
                              "must be >= 1"));
    MOE_VERIFY_OK(requireAttr(View::kAttentionFactorAttr,
                              std::isfinite(*op.attentionFactor()) &&
                                  *op.attentionFactor() > 0,
                              "must be > 0"));
    if (*kind == RopeScaling::Linear)
      return absl::OkStatus();
    MOE_VERIFY_OK(requireAttr(View::kOriginalMaxPositionsAttr,
                              *op.originalMaxPositions() >= 1,
                              "must be >= 1"));
    if (*kind == RopeScaling::Yarn) {
      MOE_VERIFY_OK(requireAttr(View::kBetaSlowAttr,
                                std::isfinite(*op.betaSlow()) &&
                                    *op.betaSlow() > 0,
                                "must be > 0"));
      return requireAttr(View::kBetaFastAttr,
                         std::isfinite(*op.betaFast()) &&
                             *op.betaFast() >= *op.betaSlow(),
                         "must be >= beta_slow");
    }
    MOE_VERIFY_OK(requireAttr(View::kLowFreqFactorAttr,
                              std::isfinite(*op.lowFreqFactor()) &&
                                  *op.lowFreqFactor() > 0,
                              "must be > 0"));
    return requireAttr(View::kHighFreqFactorAttr,
                       std::isfinite(*op.highFreqFactor()) &&
                           *op.highFreqFactor() > *op.lowFreqFactor(),
                       "must be > low_freq_factor");
  }

  /// kv_heads divides heads, the query width Q is heads * head_dim, and k
  /// and v are [B, S, kv_heads * head_dim], the lse [B, heads, S].
  template <class View> absl::Status checkAttention(const View &op) {
    int64_t heads = op.heads(), kvHeads = op.kvHeads();
    MOE_VERIFY_OK(requireAttr(
        View::kKvHeadsAttr, kvHeads >= 1 && heads % kvHeads == 0,
        absl::StrCat("must be >= 1 and divide heads (", heads, ")")));
    int64_t queryWidth = bound("Q");
    if (queryWidth % heads != 0 || queryWidth == 0)
      return error(absl::StrCat("query width ", queryWidth, " is not heads (",
                                heads, ") * a positive head dim"));
    int64_t kvWidth = kvHeads * (queryWidth / heads);
    // The value head dim is the query's, or (AttentionValueDim,
    // DocumentAttention) the output's own.
    int64_t valueWidth = kvWidth;
    constexpr bool ring = std::is_same_v<View, ops::RingAttentionView> ||
                          std::is_same_v<View, ops::RingAttentionGradView>;
    constexpr bool forward = std::is_same_v<View, ops::AttentionView> ||
                             std::is_same_v<View, ops::AttentionValueDimView> ||
                             std::is_same_v<View, ops::DocumentAttentionView> ||
                             std::is_same_v<View, ops::RingAttentionView>;
    constexpr bool ownValueDim =
        std::is_same_v<View, ops::AttentionValueDimView> ||
        std::is_same_v<View, ops::AttentionValueDimGradView> ||
        std::is_same_v<View, ops::DocumentAttentionView> ||
        std::is_same_v<View, ops::DocumentAttentionGradView> || ring;
    if constexpr (ownValueDim) {
      // The forward's output is a result, not matched yet: read it.
      const Buffer &output =
          forward ? buffer(Role::Result, 0) : buffer(Role::Operand, 0);
      int64_t outputWidth = output.shape.size() == 3 ? output.shape[2] : 0;
      if (outputWidth % heads != 0 || outputWidth == 0)
        return error(absl::StrCat("output width ", outputWidth,
                                  " is not heads (", heads,
                                  ") * a positive value head dim"));
      valueWidth = kvHeads * (outputWidth / heads);
    }
    // The keys and values are the whole sequence: with a sequence group,
    // the queries are this rank's block of it.
    absl::StatusOr<int64_t> whole = sequenceLength(op);
    if (!whole.ok())
      return whole.status();
    // A ring's keys and values are the rank's block, as its queries.
    int64_t keys = ring ? bound("S") : *whole;
    MOE_VERIFY_OK(operandShape(View::kKOperand, {"B", keys, kvWidth}));
    MOE_VERIFY_OK(operandShape(View::kVOperand, {"B", keys, valueWidth}));
    if constexpr (forward) {
      return resultShape(View::kLseResult, {"B", heads, "S"});
    } else {
      MOE_VERIFY_OK(operandShape(View::kLseOperand, {"B", heads, "S"}));
      MOE_VERIFY_OK(resultShape(View::kDkResult, {"B", keys, kvWidth}));
      return resultShape(View::kDvResult, {"B", keys, valueWidth});
    }
  }

  /// The whole sequence's length S * parts of an instruction whose
  /// operand 0 ([B, S, ...]) is its block along a `sequence` group (S
  /// without one); a load-balanced split needs 2 cp chunks of it.
  template <class View> absl::StatusOr<int64_t> sequenceLength(const View &op) {
    int64_t length = bound("S");
    std::optional<int64_t> group = op.sequence();
    if (!group)
      return length;

    if (program.versionMajor == 3 && program.versionMinor < 8)
      return error(absl::StrCat(
          "has a sequence group, which artifacts have since version 3.8; "
          "this one is ",
          program.versionMajor, ".", program.versionMinor));
    length *= program.partsOf(program.groups[*group]);
    MOE_VERIFY_OK(checkBalancedSplit("its sequence", length, *group));
    return length;
  }

  /// Context parallelism's load-balanced split over a group that cp leads
  /// cuts the `whole` elements of `what` into 2 cp chunks.
  absl::Status checkBalancedSplit(const std::string &what, int64_t whole,
                                  int64_t group) {
    int64_t cp = program.balancedSplitOf(program.groups[group]);
    if (cp <= 1 || whole % (2 * cp) == 0)
      return absl::OkStatus();
    return error(absl::StrCat(what, " (", whole,
                              " whole) is split load-balanced over group ",
                              group, " ", formatAxes(program.groups[group]),
                              ", which needs it divisible by 2 * cp (", 2 * cp,
                              ")"));
  }

  /// A per-head concatenation's parts: a is heads parts, b heads parts or
  /// one shared part, and they fill the whole.
  template <class View> absl::Status checkHeadParts(const View &op) {
    // The rules run before the results' shapes are matched: read them.
    constexpr bool concat = std::is_same_v<View, ops::ConcatHeadsView>;
    auto width = [&](Role role, size_t i) {
      const std::vector<int64_t> &shape = buffer(role, i).shape;
      return shape.empty() ? int64_t{0} : shape.back();
    };
    int64_t heads = op.heads();
    int64_t first = concat ? width(Role::Operand, 0) : width(Role::Result, 0);
    int64_t second = concat ? width(Role::Operand, 1) : width(Role::Result, 1);
    int64_t whole = concat ? width(Role::Result, 0) : width(Role::Operand, 0);
    if (first % heads != 0)
      return error(absl::StrCat("the first part's width ", first,
                                " is not a multiple of heads (", heads, ")"));
    if (!headPartsOf(heads, first, second, whole))
      return error(
          absl::StrCat("widths ", first, " and ", second, " do not make ",
                       whole, ": expected heads (", heads,
                       ") parts of each, or the second shared by every head"));
    return absl::OkStatus();
  }

  /// The FP8 recipe of the expert GEMMs, when there is one. Delayed
  /// scaling, and only it, comes with an amax history operand after the
  /// weights.
  template <class View> absl::Status checkFp8Recipe(const View &op) {
    constexpr size_t history = View::kAmaxHistoryOperand;
    bool hasHistory = op.amaxHistory().has_value();
    std::optional<Fp8Scaling> scaling = op.fp8Scaling();
    bool delayed = scaling == Fp8Scaling::Delayed;
    if (scaling == Fp8Scaling::None && !*op.fp8Dispatch())
      return requireAttr(View::kFp8ScalingAttr, false,
                         "must not be none without FP8 token dispatch");
    if (delayed != hasHistory)
      return error(hasHistory
                       ? absl::StrCat("operand ", history,
                                      " (an FP8 amax history) needs delayed "
                                      "FP8 scaling (fp8_scaling delayed)")
                       : absl::StrCat("delayed FP8 scaling needs an amax "
                                      "history as operand ",
                                      history));
    return hasHistory ? checkAmaxHistory(history, bound("E"))
                      : absl::OkStatus();
  }

  /// An amax history of `experts` experts: optimizer state (it persists
  /// across steps) of shape [experts, roles, length >= 2].
  absl::Status checkAmaxHistory(size_t i, int64_t experts) {
    MOE_VERIFY_OK(requireKind(i, BufferKind::OptimizerState));
    const std::vector<int64_t> &shape = operand(i).shape;
    if (shape.size() != 3 || shape[0] != experts ||
        shape[1] != cpu::kFp8ExpertRoles || shape[2] < 2)
      return error(absl::StrCat(
          "operand ", i, " (", describeBuffer(program, instruction.operands[i]),
          ") has shape ", formatShape(shape), ", expected an amax history [",
          experts < 0 ? std::string("E") : absl::StrCat(experts), ", ",
          cpu::kFp8ExpertRoles, ", L >= 2]"));
    return absl::OkStatus();
  }

  /// The load counter persists across microbatches until the step's
  /// update clears it; a bias persists across steps.
  absl::Status checkExpertLoad(const ops::ExpertLoadView &op) {
    return requireKind(op.kLoadOperand, BufferKind::OptimizerState);
  }
  absl::Status checkExpertLoadUpdate(const ops::ExpertLoadUpdateView &op) {
    MOE_VERIFY_OK(requireKind(op.kLoadOperand, BufferKind::OptimizerState));
    if (!op.bias())
      return requireAttr(op.kRateAttr, op.rate() == 0.0f,
                         "must be 0 without a bias operand");
    MOE_VERIFY_OK(requireKind(op.kBiasOperand, BufferKind::OptimizerState));
    return requireAttr(op.kRateAttr, op.rate() > 0.0f,
                       "must be > 0 with a bias operand");
  }

  absl::Status checkAmaxUpdate(const ops::Fp8AmaxUpdateView &op) {
    const std::vector<int64_t> &shape = program.buffers[op.history()].shape;
    return checkAmaxHistory(op.kHistoryOperand,
                            shape.empty() ? -1 : shape[0]);
  }

  /// The routing weights [..., k] against the experts, over the group when
  /// the experts are distributed.
  template <class View> absl::Status checkExpertRouting(const View &op) {
    constexpr size_t weights = View::kWeightsOperand;
    int64_t topK = bound("k"), local = bound("E");
    std::optional<int64_t> group = op.group();
    // With a group, E counts this rank's experts; the ids name the
    // local * size experts of the whole group.
    int64_t ranks = 1, experts = local;
    std::string over;
    if (group) {
      ranks = program.partsOf(program.groups[*group]);
      // Ids are int32, so more experts than int32 names cannot be routed to.
      if (__builtin_mul_overflow(local, ranks, &experts) ||
          experts > std::numeric_limits<int32_t>::max())
        return error(absl::StrCat(
            local, " experts on each of the ", ranks, " ranks of group ",
            *group, " ", formatAxes(program.groups[*group]),
            " are more than the ", std::numeric_limits<int32_t>::max(),
            " an int32 id can name"));
      over = absl::StrCat(" (", local, " on each of the ", ranks,
                          " ranks of group ", *group, " ",
                          formatAxes(program.groups[*group]), ")");
    }
    if (topK < 1 || topK > experts)
      return error(absl::StrCat("top-k (last dim of the weights) is ", topK,
                                ", expected 1 <= k <= E = ", experts, over));
    // An expert's gathered rows are a GEMM dimension, which the kernel
    // hands to 32-bit BLAS (lib/Runtime/Cpu/Linear.cpp), and one expert may
    // receive every assignment.
    int64_t assignments = operand(weights).numElements();
    if (assignments > std::numeric_limits<int32_t>::max())
      return error(absl::StrCat(
          "operand ", weights, " routes ", assignments,
          " token-expert assignments (rows times k), more than the ",
          std::numeric_limits<int32_t>::max(), " a GEMM can address"));
    if (!group)
      return absl::OkStatus();
    // Expert parallel: one rank may receive every assignment of the group,
    // in one all-to-all whose counts and offsets are ints, as rows of H
    // floats (Experts) or 2H + 1 (ExpertsGrad: x, dy and the weight).
    int64_t width = bound("H");
    constexpr bool backward =
        std::is_same_v<View, ops::ExpertsGradView> ||
        std::is_same_v<View, ops::ExpertsGradWithHiddenView>;
    if (backward && (__builtin_mul_overflow(width, 2, &width) ||
                     __builtin_add_overflow(width, 1, &width)))
      width = std::numeric_limits<int64_t>::max();
    int64_t received = 0;
    if (__builtin_mul_overflow(assignments, ranks, &received) ||
        __builtin_mul_overflow(received, width, &received) ||
        received > std::numeric_limits<int32_t>::max())
      return error(absl::StrCat(
          "operand ", weights, " routes ", assignments,
          " token-expert assignments on each of the ", ranks,
          " ranks of group ", *group, " ", formatAxes(program.groups[*group]),
          "; one rank may receive them all, as rows of ", width,
          " floats: more than the ", std::numeric_limits<int32_t>::max(),
          " one exchange can move"));
    return absl::OkStatus();
  }

  /// The saved up projections stay where the experts ran; with expert
  /// parallelism those are other ranks, whose rows this instruction's
  /// buffers do not hold, so the kept form runs on one rank only.
  template <class View> absl::Status checkHiddenOnOneRank(const View &op) {
    if (std::optional<int64_t> group = op.group())
      return error(absl::StrCat(
          "keeps the experts' up projections but distributes the experts "
          "over group ",
          *group, " ", formatAxes(program.groups[*group]),
          "; with expert parallelism the backward recomputes them "
          "(ExpertsGrad)"));
    return absl::OkStatus();
  }

  template <class View> absl::Status checkCollectiveSize(const View &) {
    for (Role role : {Role::Operand, Role::Result}) {
      int64_t count = buffer(role, 0).numElements();
      if (count > kMaxCollectiveElements)
        return error(absl::StrCat(
            roleName(role), " 0 (", describeBuffer(program, indices(role)[0]),
            ") has ", count, " elements, more than the ",
            kMaxCollectiveElements, " one collective can move"));
    }
    return absl::OkStatus();
  }

  /// AllGather multiplies dimension `dim` by the group's size;
  /// ReduceScatter and Slice divide it, which it must allow.
  template <class View> absl::Status checkCollectiveDim(const View &op) {
    int64_t group = op.group();
    int64_t size = program.partsOf(program.groups[group]);
    const std::vector<int64_t> &shape = operand(0).shape;
    int64_t dim = op.dim();
    int64_t rank = static_cast<int64_t>(shape.size());
    MOE_VERIFY_OK(requireAttr(
        View::kDimAttr, dim >= 0 && dim < rank,
        absl::StrCat("must be a dimension of operand 0 (rank ", rank, ")")));
    std::vector<int64_t> expected = shape;
    if (std::is_same_v<View, ops::AllGatherView>) {
      expected[dim] *= size;
    } else {
      if (shape[dim] % size != 0)
        return error(absl::StrCat(
            "operand 0 has size ", shape[dim], " along dimension ", dim,
            ", which the ", size, " ranks of group ", group, " ",
            formatAxes(program.groups[group]), " do not divide"));
      expected[dim] /= size;
    }
    MOE_VERIFY_OK(checkBalancedSplit(absl::StrCat("dimension ", dim),
                                     std::max(shape[dim], expected[dim]),
                                     group));
    return resultShape(0, exactly(expected));
  }

  /// One result per operand, all of the operands' one dtype, each its
  /// operand's shape, or with `scatter` its block along dimension 0; the
  /// packed message within what one collective can move.
  absl::Status checkReduceBucket(const ops::ReduceBucketView &op) {
    const std::vector<uint32_t> &xs = op.xs(), &ys = op.ys();
    if (xs.size() != ys.size())
      return error(absl::StrCat("has ", xs.size(), " operands but ", ys.size(),
                                " results, expected one per "
                                "operand"));
    DType dtype = program.buffers[xs[0]].dtype;
    int64_t total = 0;
    int64_t group = op.group();
    int64_t size = program.partsOf(program.groups[group]);
    for (size_t i = 0; i < xs.size(); ++i) {
      for (uint32_t b : {xs[i], ys[i]})
        if (program.buffers[b].dtype != dtype)
          return error(absl::StrCat(describeBuffer(program, b), " has dtype ",
                                    dtypeName(program.buffers[b].dtype),
                                    ", but operand 0 ", dtypeName(dtype),
                                    ": a bucket moves one dtype"));
      const std::vector<int64_t> &shape = program.buffers[xs[i]].shape;
      total += program.buffers[xs[i]].numElements();
      std::vector<int64_t> expected = shape;
      if (op.scatter()) {
        // A bucket scatters gradients of weights, which nothing splits
        // load-balanced (its runtime packs contiguous blocks only).
        if (program.balancedSplitOf(program.groups[group]) > 1)
          return error(absl::StrCat(
              "scatters over group ", group, " ",
              formatAxes(program.groups[group]),
              ", which cp leads: a bucket scatters contiguous blocks, not "
              "context parallelism's load-balanced split"));
        if (shape.empty() || shape[0] % size != 0)
          return error(absl::StrCat(
              "operand ", i, " (", describeBuffer(program, xs[i]),
              ") has no dimension 0 that the ", size, " ranks of group ", group,
              " ", formatAxes(program.groups[group]), " divide"));
        expected[0] /= size;
      }
      MOE_VERIFY_OK(resultShape(i, exactly(expected)));
    }
    if (total > kMaxCollectiveElements)
      return error(absl::StrCat("packs ", total, " elements, more than the ",
                                kMaxCollectiveElements,
                                " one collective can move"));
    return absl::OkStatus();
  }

  /// A cast changes the dtype; one to the same dtype is a copy the
  /// compiler never writes, so it marks a damaged or hand-edited program.
  absl::Status checkCast(const ops::CastView &op) {
    DType from = program.buffers[op.x()].dtype, to = program.buffers[op.y()].dtype;
    if (from == to)
      return error(absl::StrCat("casts ", describeBuffer(program, op.x()),
                                " to its own dtype ", dtypeName(from)));
    return absl::OkStatus();
  }

  /// What AdamW and ShardedAdamW both require of their operands: a
  /// parameter, its two distinct moments, and a weight decay its flag
  /// allows.
  template <class View> absl::Status checkAdamWOperands(const View &op) {
    MOE_VERIFY_OK(requireKind(op.kParamOperand, BufferKind::Parameter));
    // The flag says how the parameter is trained (moec clears it for norm
    // weights); an update that decays it anyway contradicts the artifact.
    if (!program.buffers[op.param()].weightDecay)
      MOE_VERIFY_OK(requireAttr(
          op.kWeightDecayAttr, op.weightDecay() == 0,
          absl::StrCat("must be 0 for operand 0 (",
                       describeBuffer(program, op.param()),
                       "), whose weight_decay flag is false")));
    MOE_VERIFY_OK(requireKind(op.kExpAvgOperand, BufferKind::OptimizerState));
    MOE_VERIFY_OK(
        requireKind(op.kExpAvgSqOperand, BufferKind::OptimizerState));
    if (op.expAvg() == op.expAvgSq())
      return error("exp_avg and exp_avg_sq (operands 2 and 3) must be "
                   "distinct buffers");
    if (std::optional<uint32_t> working = op.working()) {
      MOE_VERIFY_OK(requireKind(op.kWorkingOperand, BufferKind::WorkingCopy));
      if (program.buffers[*working].master != op.param())
        return error(absl::StrCat(
            "operand ", op.kWorkingOperand, " (",
            describeBuffer(program, *working), ") is the working copy of ",
            describeBuffer(program, program.buffers[*working].master),
            ", not of operand 0 (", describeBuffer(program, op.param()), ")"));
    }
    return absl::OkStatus();
  }

  absl::Status checkAdamW(const ops::AdamWView &op) {
    MOE_VERIFY_OK(checkAdamWOperands(op));
    // The moments are updated element for element with the parameter, so
    // each rank must hold the same block of all three.
    for (size_t i : {op.kExpAvgOperand, op.kExpAvgSqOperand})
      if (operand(i).split != operand(0).split)
        return error(absl::StrCat(
            "operand ", i, " (",
            describeBuffer(program, instruction.operands[i]), ") is split ",
            formatSplit(operand(i).split), " but operand 0 (",
            describeBuffer(program, instruction.operands[0]), ") is split ",
            formatSplit(operand(0).split)));
    return absl::OkStatus();
  }

  /// ZeRO-1: the block (grad, the moments and, with a working copy, the
  /// master) is the whole copy's dimension 0 split further over the group,
  /// whose ranks hold the same whole copy.
  absl::Status checkShardedAdamW(const ops::ShardedAdamWView &op) {
    MOE_VERIFY_OK(checkAdamWOperands(op));
    const AxisList &axes = program.groups[op.group()];
    if (program.balancedSplitOf(axes) > 1)
      return error(absl::StrCat("shards over group ", op.group(), " ",
                                formatAxes(axes),
                                ", which cp leads: a block of rows is "
                                "contiguous, not context parallelism's "
                                "load-balanced split"));
    size_t whole = op.working() ? op.kWorkingOperand : op.kParamOperand;
    const Buffer &copy = operand(whole);
    std::vector<int64_t> block = copy.shape;
    int64_t size = program.partsOf(axes);
    if (block.empty() || block[0] % size != 0)
      return error(absl::StrCat(
          "operand ", whole, " (",
          describeBuffer(program, instruction.operands[whole]),
          ") has no dimension 0 that the ", size, " ranks of group ",
          op.group(), " ", formatAxes(axes), " divide"));
    block[0] /= size;
    std::vector<size_t> blocks = {op.kGradOperand, op.kExpAvgOperand,
                                  op.kExpAvgSqOperand};
    if (op.working())
      blocks.push_back(op.kParamOperand);
    std::vector<AxisList> split = copy.split;
    split.resize(block.size());
    split[0].insert(split[0].end(), axes.begin(), axes.end());
    for (size_t i : blocks) {
      if (operand(i).shape != block)
        return error(absl::StrCat(
            "operand ", i, " (",
            describeBuffer(program, instruction.operands[i]), ") has shape ",
            formatShape(operand(i).shape), ", expected ", formatShape(block),
            ": operand ", whole, "'s rows over the ", size, " ranks of group ",
            op.group(), " ", formatAxes(axes)));
      if (i != op.kGradOperand && operand(i).split != split)
        return error(
            absl::StrCat("operand ", i, " (",
                         describeBuffer(program, instruction.operands[i]),
                         ") is split ", formatSplit(operand(i).split),
                         ", expected ", formatSplit(split), ": operand ", whole,
                         "'s split with dimension 0 split further "
                         "over group ",
                         op.group(), " ", formatAxes(axes)));
    }
    return absl::OkStatus();
  }

  const Program &program;
  size_t index;
  const Instruction &instruction;
  const ops::OpInfo *info = nullptr;
  const ops::AttrLayout *layout = nullptr;
  ShapeMatcher shapes;
};

} // namespace

absl::Status verifyInstruction(const Program &program, size_t index) {
  return InstructionChecker(program, index).check();
}

bool allowsInPlace(Opcode opcode) { return ops::opInfo(opcode).inPlace; }

} // namespace moe::rt::verifier
