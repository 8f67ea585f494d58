//===- InstructionRules.cpp - per-opcode checks of one instruction --------===//
//
// The reference for each opcode's layout (Program.fbs only sketches it): how
// many operands, results and attributes it takes, which of them are int32,
// what the attribute values may be, and how the shapes relate. Everything
// the executor derives from a buffer's shape (T, K, N, heads, ...) is
// checked here, so the kernels can index without bounds checks.
//
//===----------------------------------------------------------------------===//

#include "ShapePattern.h"
#include "VerifierSupport.h"

#include "moe/Runtime/Cpu/Kernels.h"

#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moe::rt::verifier {
namespace {

/// The fixed part of an opcode's layout.
struct Signature {
  size_t minOperands;
  size_t maxOperands; // kUnbounded: any number >= minOperands
  size_t results;
  std::vector<const char *> intAttrs;
  // Names of the float attributes; WeightedSum instead takes one
  // coefficient per operand.
  std::vector<const char *> floatAttrs;
  std::vector<size_t> i32Operands;
  std::vector<size_t> i32Results;
  // The int attributes may end with one more, a group (Program.groups): the
  // one the tokens are split over (version 1.1 losses), or the one the
  // experts are distributed over (Experts, ExpertsGrad).
  bool trailingGroup = false;
  // The float attributes may also be left out all together (version 1.3:
  // the FP8 recipe of Experts and ExpertsGrad).
  bool optionalFloats = false;
};

constexpr size_t kUnbounded = SIZE_MAX;
constexpr bool kTrailingGroup = true;
constexpr bool kOptionalFloats = true;

/// The most elements one collective may move: MPI counts are ints.
constexpr int64_t kMaxCollectiveElements = std::numeric_limits<int32_t>::max();

const Signature &signatureOf(Opcode opcode) {
  // Indexed by opcode value, in schema order. Columns: min and max operand
  // count, result count, int attribute names, float attribute names, int32
  // operand positions, int32 result positions, optional trailing group.
  static const Signature kSignatures[] = {
      /*Embedding*/ {2, 2, 1, {}, {}, {0}, {}},
      /*EmbeddingGrad*/ {2, 2, 1, {}, {}, {1}, {}},
      /*RmsNorm*/ {2, 2, 1, {}, {"eps"}, {}, {}},
      /*RmsNormGrad*/ {3, 3, 2, {}, {"eps"}, {}, {}},
      /*Linear*/ {2, 2, 1, {}, {}, {}, {}},
      /*LinearGradInput*/ {2, 2, 1, {}, {}, {}, {}},
      /*LinearGradWeight*/ {2, 2, 1, {}, {}, {}, {}},
      /*Rope*/ {1, 1, 1, {"heads"}, {"theta"}, {}, {}},
      /*RopeGrad*/ {1, 1, 1, {"heads"}, {"theta"}, {}, {}},
      /*Attention*/ {3, 3, 2, {"heads", "kv_heads"}, {}, {}, {}},
      /*AttentionGrad*/ {6, 6, 3, {"heads", "kv_heads"}, {}, {}, {}},
      /*Router*/ {1, 1, 3, {"top_k"}, {"capacity_factor"}, {}, {2}},
      /*RouterGrad*/ {2, 3, 1, {"top_k"}, {}, {}, {}},
      // The optional group distributes the experts (expert parallelism).
      // Delayed FP8 scaling adds the amax history as the last operand.
      /*Experts*/
      {6, 7, 1, {}, {"fp8_scaling", "fp8_block", "fp8_dispatch"}, {2}, {},
       kTrailingGroup, kOptionalFloats},
      /*ExpertsGrad*/
      {7, 8, 5, {}, {"fp8_scaling", "fp8_block", "fp8_dispatch"}, {3}, {},
       kTrailingGroup, kOptionalFloats},
      /*Swiglu*/ {2, 2, 1, {}, {}, {}, {}},
      /*SwigluGrad*/ {3, 3, 2, {}, {}, {}, {}},
      /*Add*/ {2, 2, 1, {}, {}, {}, {}},
      /*CrossEntropy*/ {2, 2, 1, {}, {}, {1}, {}, kTrailingGroup},
      /*CrossEntropyGrad*/ {3, 3, 1, {}, {}, {2}, {}, kTrailingGroup},
      /*AuxLoss*/ {1, 1, 1, {"top_k"}, {}, {}, {}, kTrailingGroup},
      /*AuxLossGrad*/ {2, 2, 1, {"top_k"}, {}, {}, {}, kTrailingGroup},
      /*WeightedSum*/ {1, kUnbounded, 1, {}, {}, {}, {}},
      /*Constant*/ {0, 0, 1, {}, {"value"}, {}, {}},
      // Int attributes: none, or one group per operand (checkSignature).
      /*GlobalNorm*/ {1, kUnbounded, 1, {}, {}, {}, {}},
      /*ClipCoefficient*/ {1, 1, 1, {}, {"max_norm"}, {}, {}},
      /*LearningRate*/ {1, 1, 1, {"warmup", "decay"}, {"peak", "min"}, {0}, {}},
      /*AdamW*/
      {7, 7, 0, {}, {"beta1", "beta2", "eps", "weight_decay"}, {6}, {}},
      /*AllReduce*/ {1, 1, 1, {"group"}, {}, {}, {}},
      /*AllGather*/ {1, 1, 1, {"group", "dim"}, {}, {}, {}},
      /*ReduceScatter*/ {1, 1, 1, {"group", "dim"}, {}, {}, {}},
      /*Slice*/ {1, 1, 1, {"group", "dim"}, {}, {}, {}},
      // The optional group holds copies of the history (a maximum over it).
      /*Fp8AmaxUpdate*/ {1, 1, 0, {}, {}, {}, {}, kTrailingGroup},
  };
  static_assert(sizeof(kSignatures) / sizeof(kSignatures[0]) == kNumOpcodes,
                "every opcode needs a signature");
  return kSignatures[static_cast<size_t>(opcode)];
}

std::string plural(size_t count, const char *noun) {
  return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
}

std::string attrList(const std::vector<const char *> &names) {
  return absl::StrCat("[", absl::StrJoin(names, ", "), "]");
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
    MOE_VERIFY_OK(checkSignature());
    MOE_VERIFY_OK(checkFloatsFinite());
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

  /// Counts, index ranges, dtypes and attribute counts.
  absl::Status checkSignature() {
    const Signature &signature = signatureOf(instruction.opcode);
    size_t operands = instruction.operands.size();
    if (operands < signature.minOperands || operands > signature.maxOperands) {
      std::string expected =
          signature.maxOperands == kUnbounded
              ? absl::StrCat("at least ", signature.minOperands)
          : signature.minOperands == signature.maxOperands
              ? absl::StrCat(signature.minOperands)
              : absl::StrCat(signature.minOperands, " or ",
                             signature.maxOperands);
      return error(
          absl::StrCat("expected ", expected, " operands, found ", operands));
    }
    if (instruction.results.size() != signature.results)
      return error(absl::StrCat("expected ",
                                plural(signature.results, "result"), ", found ",
                                instruction.results.size()));
    for (Role role : {Role::Operand, Role::Result}) {
      const std::vector<size_t> &i32 =
          role == Role::Operand ? signature.i32Operands : signature.i32Results;
      for (size_t i = 0; i < indices(role).size(); ++i) {
        uint32_t index = indices(role)[i];
        if (index >= program.buffers.size())
          return error(absl::StrCat(roleName(role), " ", i, ": buffer index ",
                                    index, " is out of range (",
                                    program.buffers.size(), " buffers)"));
        DType expected =
            std::count(i32.begin(), i32.end(), i) ? DType::I32 : DType::F32;
        // Gathers and slices move ids too (tokens, expert indices): either
        // dtype, the same on both sides.
        if (instruction.opcode == Opcode::AllGather ||
            instruction.opcode == Opcode::Slice)
          expected = role == Role::Operand
                         ? program.buffers[index].dtype
                         : program.buffers[instruction.operands[0]].dtype;
        DType actual = program.buffers[index].dtype;
        if (actual != expected)
          return error(absl::StrCat(roleName(role), " ", i, " (",
                                    describeBuffer(program, index),
                                    ") has dtype ", dtypeName(actual),
                                    ", expected ", dtypeName(expected)));
      }
    }
    MOE_VERIFY_OK(checkIntAttrCount(signature));
    if (instruction.opcode == Opcode::WeightedSum) {
      if (instruction.floatAttrs.size() != operands)
        return error(absl::StrCat(
            "expected one float attribute (coefficient) per operand: ",
            plural(operands, "operand"), ", ",
            plural(instruction.floatAttrs.size(), "float attribute")));
    } else if (instruction.floatAttrs.size() != signature.floatAttrs.size() &&
               !(signature.optionalFloats && instruction.floatAttrs.empty())) {
      return error(absl::StrCat(
          "expected ", plural(signature.floatAttrs.size(), "float attribute"),
          " ", attrList(signature.floatAttrs),
          signature.optionalFloats ? " or none" : "", ", found ",
          instruction.floatAttrs.size()));
    }
    return absl::OkStatus();
  }

  absl::Status checkIntAttrCount(const Signature &signature) {
    size_t found = instruction.intAttrs.size();
    size_t fixed = signature.intAttrs.size();
    if (instruction.opcode == Opcode::GlobalNorm) {
      size_t operands = instruction.operands.size();
      if (found != 0 && found != operands)
        return error(absl::StrCat(
            "expected no int attributes or one group per operand (", operands,
            "), found ", found));
      return absl::OkStatus();
    }
    if (found == fixed || (signature.trailingGroup && found == fixed + 1))
      return absl::OkStatus();
    return error(absl::StrCat(
        "expected ", plural(fixed, "int attribute"), " ",
        attrList(signature.intAttrs),
        signature.trailingGroup ? " and an optional trailing group" : "",
        ", found ", found));
  }

  /// No attribute of any opcode has a meaningful NaN or infinite value.
  absl::Status checkFloatsFinite() {
    for (size_t i = 0; i < instruction.floatAttrs.size(); ++i)
      if (!std::isfinite(instruction.floatAttrs[i]))
        return error(absl::StrCat("float attribute ", i, " ", floatAttrName(i),
                                  "is not finite (", instruction.floatAttrs[i],
                                  ")"));
    return absl::OkStatus();
  }

  std::string floatAttrName(size_t i) const {
    const auto &names = signatureOf(instruction.opcode).floatAttrs;
    return i < names.size() ? absl::StrCat("(", names[i], ") ") : "";
  }
  std::string intAttrName(size_t i) const {
    const Signature &signature = signatureOf(instruction.opcode);
    const auto &names = signature.intAttrs;
    if (i < names.size())
      return absl::StrCat("(", names[i], ") ");
    bool group =
        signature.trailingGroup || instruction.opcode == Opcode::GlobalNorm;
    return group ? "(group) " : "";
  }

  /// The FP8 recipe of the expert GEMMs, when there is one: the scaling (0
  /// none: FP8 on the wire only, 1 tensorwise, 2 blockwise, 3 delayed), the
  /// block size, and whether tokens travel in FP8, whole numbers. Delayed
  /// scaling, and only it, comes with an amax history operand after the
  /// weights (`first` is w1's position).
  absl::Status checkFp8Recipe(size_t first) {
    bool history = instruction.operands.size() == first + 4;
    if (instruction.floatAttrs.empty()) {
      if (history)
        return error(absl::StrCat("operand ", first + 3,
                                  " (an FP8 amax history) needs delayed FP8 "
                                  "scaling (fp8_scaling 3)"));
      return absl::OkStatus();
    }
    float scaling = instruction.floatAttrs[0], block = instruction.floatAttrs[1];
    float dispatch = instruction.floatAttrs[2];
    MOE_VERIFY_OK(requireFloat(0, scaling >= 0.0f && scaling <= 3.0f &&
                                      scaling == std::floor(scaling),
                               "must be 0 (none), 1 (tensorwise), 2 "
                               "(blockwise) or 3 (delayed)"));
    MOE_VERIFY_OK(requireFloat(1,
                               block >= 1.0f && block <= 65536.0f &&
                                   block == std::floor(block),
                               "must be a whole number in [1, 65536]"));
    MOE_VERIFY_OK(requireFloat(2, dispatch == 0.0f || dispatch == 1.0f,
                               "must be 0 or 1 (FP8 token dispatch)"));
    if (scaling == 0.0f && dispatch == 0.0f)
      return requireFloat(0, false,
                          "must not be 0 (none) without FP8 token dispatch");
    if ((scaling == 3.0f) != history)
      return error(history ? absl::StrCat("operand ", first + 3,
                                          " (an FP8 amax history) needs "
                                          "delayed FP8 scaling (fp8_scaling 3)")
                           : absl::StrCat("delayed FP8 scaling needs an amax "
                                          "history as operand ",
                                          first + 3));
    return history ? checkAmaxHistory(first + 3, bound("E")) : absl::OkStatus();
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

  /// Checks an attribute value; `requirement` reads "must be >= 1".
  absl::Status requireInt(size_t i, bool ok, absl::string_view requirement) {
    if (ok)
      return absl::OkStatus();
    return error(absl::StrCat("int attribute ", i, " ", intAttrName(i),
                              requirement, ", found ",
                              instruction.intAttrs[i]));
  }
  absl::Status requireFloat(size_t i, bool ok, absl::string_view requirement) {
    if (ok)
      return absl::OkStatus();
    return error(absl::StrCat("float attribute ", i, " ", floatAttrName(i),
                              requirement, ", found ",
                              instruction.floatAttrs[i]));
  }

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

  /// top_k (int attribute 0) against the expert count E already bound.
  absl::Status checkTopK(int64_t experts) {
    int64_t topK = instruction.intAttrs[0];
    return requireInt(0, topK >= 1 && topK <= experts,
                      absl::StrCat("must be in [1, E] with E = ", experts));
  }

  absl::Status checkRope() {
    int64_t heads = instruction.intAttrs[0];
    MOE_VERIFY_OK(requireInt(0, heads >= 1, "must be >= 1"));
    MOE_VERIFY_OK(
        requireFloat(0, instruction.floatAttrs[0] > 0, "must be > 0"));
    // Rotary positions are the sequence index, so the sequence axis must be
    // explicit: [B, S, heads * d].
    MOE_VERIFY_OK(operandShape(0, {"B", "S", "X"}));
    int64_t width = bound("X");
    if (width % heads != 0 || (width / heads) % 2 != 0 || width == 0)
      return error(absl::StrCat("operand 0 has last dim ", width,
                                ", expected heads (", heads,
                                ") * an even, positive head dim"));
    return resultShape(0, {"B", "S", "X"});
  }

  absl::Status checkAttentionHeads(int64_t queryWidth, int64_t &headDim) {
    int64_t heads = instruction.intAttrs[0], kvHeads = instruction.intAttrs[1];
    MOE_VERIFY_OK(requireInt(0, heads >= 1, "must be >= 1"));
    MOE_VERIFY_OK(requireInt(
        1, kvHeads >= 1 && heads % kvHeads == 0,
        absl::StrCat("must be >= 1 and divide heads (", heads, ")")));
    if (queryWidth % heads != 0 || queryWidth == 0)
      return error(absl::StrCat("query width ", queryWidth, " is not heads (",
                                heads, ") * a positive head dim"));
    headDim = queryWidth / heads;
    return absl::OkStatus();
  }

  absl::Status checkOpcode() {
    switch (instruction.opcode) {
    case Opcode::Embedding:
      MOE_VERIFY_OK(operandShape(0, {"..."}));
      MOE_VERIFY_OK(operandShape(1, {"V", "H"}));
      return resultShape(0, {"...", "H"});
    case Opcode::EmbeddingGrad:
      MOE_VERIFY_OK(operandShape(0, {"...", "H"}));
      MOE_VERIFY_OK(operandShape(1, {"..."}));
      return resultShape(0, {"V", "H"});
    case Opcode::RmsNorm:
      MOE_VERIFY_OK(
          requireFloat(0, instruction.floatAttrs[0] > 0, "must be > 0"));
      MOE_VERIFY_OK(operandShape(0, {"...", "H"}));
      MOE_VERIFY_OK(operandShape(1, {"H"}));
      return resultShape(0, {"...", "H"});
    case Opcode::RmsNormGrad:
      MOE_VERIFY_OK(
          requireFloat(0, instruction.floatAttrs[0] > 0, "must be > 0"));
      MOE_VERIFY_OK(operandShape(0, {"...", "H"}));
      MOE_VERIFY_OK(operandShape(1, {"...", "H"}));
      MOE_VERIFY_OK(operandShape(2, {"H"}));
      MOE_VERIFY_OK(resultShape(0, {"...", "H"}));
      return resultShape(1, {"H"});
    case Opcode::Linear:
      MOE_VERIFY_OK(operandShape(0, {"...", "K"}));
      MOE_VERIFY_OK(operandShape(1, {"N", "K"}));
      return resultShape(0, {"...", "N"});
    case Opcode::LinearGradInput:
      MOE_VERIFY_OK(operandShape(0, {"...", "N"}));
      MOE_VERIFY_OK(operandShape(1, {"N", "K"}));
      return resultShape(0, {"...", "K"});
    case Opcode::LinearGradWeight:
      MOE_VERIFY_OK(operandShape(0, {"...", "N"}));
      MOE_VERIFY_OK(operandShape(1, {"...", "K"}));
      return resultShape(0, {"N", "K"});
    case Opcode::Rope:
    case Opcode::RopeGrad:
      return checkRope();
    case Opcode::Attention: {
      MOE_VERIFY_OK(operandShape(0, {"B", "S", "Q"}));
      int64_t headDim;
      MOE_VERIFY_OK(checkAttentionHeads(bound("Q"), headDim));
      int64_t kvWidth = instruction.intAttrs[1] * headDim;
      MOE_VERIFY_OK(operandShape(1, {"B", "S", kvWidth}));
      MOE_VERIFY_OK(operandShape(2, {"B", "S", kvWidth}));
      MOE_VERIFY_OK(resultShape(0, {"B", "S", "Q"}));
      return resultShape(1, {"B", instruction.intAttrs[0], "S"});
    }
    case Opcode::AttentionGrad: {
      MOE_VERIFY_OK(operandShape(0, {"B", "S", "Q"}));
      int64_t headDim;
      MOE_VERIFY_OK(checkAttentionHeads(bound("Q"), headDim));
      int64_t kvWidth = instruction.intAttrs[1] * headDim;
      MOE_VERIFY_OK(operandShape(1, {"B", "S", "Q"}));
      MOE_VERIFY_OK(operandShape(2, {"B", "S", kvWidth}));
      MOE_VERIFY_OK(operandShape(3, {"B", "S", kvWidth}));
      MOE_VERIFY_OK(operandShape(4, {"B", "S", "Q"}));
      MOE_VERIFY_OK(operandShape(5, {"B", instruction.intAttrs[0], "S"}));
      MOE_VERIFY_OK(resultShape(0, {"B", "S", "Q"}));
      MOE_VERIFY_OK(resultShape(1, {"B", "S", kvWidth}));
      return resultShape(2, {"B", "S", kvWidth});
    }
    case Opcode::Router: {
      MOE_VERIFY_OK(operandShape(0, {"...", "E"}));
      MOE_VERIFY_OK(checkTopK(bound("E")));
      MOE_VERIFY_OK(
          requireFloat(0, instruction.floatAttrs[0] >= 0, "must be >= 0"));
      int64_t topK = instruction.intAttrs[0];
      MOE_VERIFY_OK(resultShape(0, {"...", "E"}));
      MOE_VERIFY_OK(resultShape(1, {"...", topK}));
      return resultShape(2, {"...", topK});
    }
    case Opcode::RouterGrad: {
      MOE_VERIFY_OK(operandShape(1, {"...", "E"}));
      MOE_VERIFY_OK(checkTopK(bound("E")));
      MOE_VERIFY_OK(operandShape(0, {"...", instruction.intAttrs[0]}));
      if (instruction.operands.size() == 3)
        MOE_VERIFY_OK(operandShape(2, {"...", "E"}));
      return resultShape(0, {"...", "E"});
    }
    case Opcode::Experts:
      MOE_VERIFY_OK(checkTrailingGroup());
      MOE_VERIFY_OK(operandShape(0, {"...", "H"}));
      MOE_VERIFY_OK(operandShape(1, {"...", "k"}));
      MOE_VERIFY_OK(operandShape(2, {"...", "k"}));
      MOE_VERIFY_OK(operandShape(3, {"E", "F", "H"}));
      MOE_VERIFY_OK(operandShape(4, {"E", "F", "H"}));
      MOE_VERIFY_OK(operandShape(5, {"E", "H", "F"}));
      MOE_VERIFY_OK(checkFp8Recipe(3));
      MOE_VERIFY_OK(checkExpertRouting(1));
      return resultShape(0, {"...", "H"});
    case Opcode::ExpertsGrad:
      MOE_VERIFY_OK(checkTrailingGroup());
      MOE_VERIFY_OK(operandShape(0, {"...", "H"}));
      MOE_VERIFY_OK(operandShape(1, {"...", "H"}));
      MOE_VERIFY_OK(operandShape(2, {"...", "k"}));
      MOE_VERIFY_OK(operandShape(3, {"...", "k"}));
      MOE_VERIFY_OK(operandShape(4, {"E", "F", "H"}));
      MOE_VERIFY_OK(operandShape(5, {"E", "F", "H"}));
      MOE_VERIFY_OK(operandShape(6, {"E", "H", "F"}));
      MOE_VERIFY_OK(checkFp8Recipe(4));
      MOE_VERIFY_OK(checkExpertRouting(2));
      MOE_VERIFY_OK(resultShape(0, {"...", "H"}));
      MOE_VERIFY_OK(resultShape(1, {"...", "k"}));
      MOE_VERIFY_OK(resultShape(2, {"E", "F", "H"}));
      MOE_VERIFY_OK(resultShape(3, {"E", "F", "H"}));
      return resultShape(4, {"E", "H", "F"});
    case Opcode::Swiglu:
    case Opcode::Add: {
      ShapePattern same = exactly(operand(0).shape);
      MOE_VERIFY_OK(operandShape(1, same));
      return resultShape(0, same);
    }
    case Opcode::SwigluGrad: {
      ShapePattern same = exactly(operand(0).shape);
      MOE_VERIFY_OK(operandShape(1, same));
      MOE_VERIFY_OK(operandShape(2, same));
      MOE_VERIFY_OK(resultShape(0, same));
      return resultShape(1, same);
    }
    case Opcode::CrossEntropy:
      MOE_VERIFY_OK(checkTrailingGroup());
      MOE_VERIFY_OK(operandShape(0, {"...", "V"}));
      MOE_VERIFY_OK(operandShape(1, {"..."}));
      return resultShape(0, {});
    case Opcode::CrossEntropyGrad:
      MOE_VERIFY_OK(checkTrailingGroup());
      MOE_VERIFY_OK(operandShape(0, {}));
      MOE_VERIFY_OK(operandShape(1, {"...", "V"}));
      MOE_VERIFY_OK(operandShape(2, {"..."}));
      return resultShape(0, {"...", "V"});
    case Opcode::AuxLoss:
      MOE_VERIFY_OK(checkTrailingGroup());
      MOE_VERIFY_OK(operandShape(0, {"...", "E"}));
      MOE_VERIFY_OK(checkTopK(bound("E")));
      return resultShape(0, {});
    case Opcode::AuxLossGrad:
      MOE_VERIFY_OK(checkTrailingGroup());
      MOE_VERIFY_OK(operandShape(0, {}));
      MOE_VERIFY_OK(operandShape(1, {"...", "E"}));
      MOE_VERIFY_OK(checkTopK(bound("E")));
      return resultShape(0, {"...", "E"});
    case Opcode::WeightedSum:
      for (size_t i = 0; i < instruction.operands.size(); ++i)
        MOE_VERIFY_OK(operandShape(i, {}));
      return resultShape(0, {});
    case Opcode::Constant:
      return absl::OkStatus();
    case Opcode::GlobalNorm:
      for (size_t i = 0; i < instruction.intAttrs.size(); ++i)
        if (instruction.intAttrs[i] != -1)
          MOE_VERIFY_OK(checkGroup(i, "must be -1 (not split) or"));
      return resultShape(0, {});
    case Opcode::ClipCoefficient:
      MOE_VERIFY_OK(operandShape(0, {}));
      return resultShape(0, {});
    case Opcode::LearningRate:
      MOE_VERIFY_OK(
          requireInt(0, instruction.intAttrs[0] >= 0, "must be >= 0"));
      MOE_VERIFY_OK(
          requireInt(1, instruction.intAttrs[1] >= instruction.intAttrs[0],
                     "must be >= warmup"));
      MOE_VERIFY_OK(
          requireFloat(1, instruction.floatAttrs[1] >= 0, "must be >= 0"));
      MOE_VERIFY_OK(requireFloat(
          0, instruction.floatAttrs[0] >= instruction.floatAttrs[1],
          "must be >= min"));
      MOE_VERIFY_OK(operandShape(0, {}));
      return resultShape(0, {});
    case Opcode::AdamW:
      return checkAdamW();
    case Opcode::AllReduce:
    case Opcode::AllGather:
    case Opcode::ReduceScatter:
    case Opcode::Slice:
      return checkCollective();
    case Opcode::Fp8AmaxUpdate:
      MOE_VERIFY_OK(checkTrailingGroup());
      return checkAmaxHistory(0, operand(0).shape.empty()
                                     ? -1
                                     : operand(0).shape[0]);
    }
    return error("unknown opcode");
  }

  /// `weights` is the operand holding the routing weights [..., k].
  absl::Status checkExpertRouting(size_t weights) {
    int64_t topK = bound("k"), local = bound("E");
    // With a group, E counts this rank's experts; the ids name the
    // local * size experts of the whole group.
    int64_t ranks = 1, experts = local;
    std::string over;
    if (!instruction.intAttrs.empty()) {
      int64_t group = instruction.intAttrs[0];
      ranks = program.partsOf(program.groups[group]);
      // Ids are int32, so more experts than int32 names cannot be routed to.
      if (__builtin_mul_overflow(local, ranks, &experts) ||
          experts > std::numeric_limits<int32_t>::max())
        return error(absl::StrCat(
            local, " experts on each of the ", ranks, " ranks of group ", group,
            " ", formatAxes(program.groups[group]), " are more than the ",
            std::numeric_limits<int32_t>::max(), " an int32 id can name"));
      over = absl::StrCat(" (", local, " on each of the ", ranks,
                          " ranks of group ", group, " ",
                          formatAxes(program.groups[group]), ")");
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
    if (instruction.intAttrs.empty())
      return absl::OkStatus();
    // Expert parallel: one rank may receive every assignment of the group,
    // in one all-to-all whose counts and offsets are ints, as rows of H
    // floats (Experts) or 2H + 1 (ExpertsGrad: x, dy and the weight).
    int64_t width = bound("H");
    if (instruction.opcode == Opcode::ExpertsGrad &&
        (__builtin_mul_overflow(width, 2, &width) ||
         __builtin_add_overflow(width, 1, &width)))
      width = std::numeric_limits<int64_t>::max();
    int64_t received = 0;
    if (__builtin_mul_overflow(assignments, ranks, &received) ||
        __builtin_mul_overflow(received, width, &received) ||
        received > std::numeric_limits<int32_t>::max())
      return error(absl::StrCat(
          "operand ", weights, " routes ", assignments,
          " token-expert assignments on each of the ", ranks,
          " ranks of group ", instruction.intAttrs[0], " ",
          formatAxes(program.groups[instruction.intAttrs[0]]),
          "; one rank may receive them all, as rows of ", width,
          " floats: more than the ", std::numeric_limits<int32_t>::max(),
          " one exchange can move"));
    return absl::OkStatus();
  }

  /// Int attribute `i` names one of the program's groups; `prefix` leads
  /// the requirement when other values are allowed too.
  absl::Status checkGroup(size_t i, absl::string_view prefix = "must be") {
    int64_t group = instruction.intAttrs[i];
    int64_t groups = static_cast<int64_t>(program.groups.size());
    return requireInt(
        i, group >= 0 && group < groups,
        absl::StrCat(prefix, " a group index in [0, ", groups, ")"));
  }

  /// The group a loss's tokens are split over, when it names one.
  absl::Status checkTrailingGroup() {
    size_t fixed = signatureOf(instruction.opcode).intAttrs.size();
    if (instruction.intAttrs.size() > fixed)
      return checkGroup(fixed);
    return absl::OkStatus();
  }

  /// AllReduce keeps the shape; AllGather multiplies dimension `dim` by the
  /// group's size; ReduceScatter and Slice divide it, which it must allow.
  absl::Status checkCollective() {
    MOE_VERIFY_OK(checkGroup(0));
    int64_t group = instruction.intAttrs[0];
    int64_t size = program.partsOf(program.groups[group]);
    for (Role role : {Role::Operand, Role::Result}) {
      int64_t count = buffer(role, 0).numElements();
      if (count > kMaxCollectiveElements)
        return error(absl::StrCat(
            roleName(role), " 0 (", describeBuffer(program, indices(role)[0]),
            ") has ", count, " elements, more than the ",
            kMaxCollectiveElements, " one collective can move"));
    }
    const std::vector<int64_t> &shape = operand(0).shape;
    if (instruction.opcode == Opcode::AllReduce)
      return resultShape(0, exactly(shape));
    int64_t dim = instruction.intAttrs[1];
    int64_t rank = static_cast<int64_t>(shape.size());
    MOE_VERIFY_OK(requireInt(
        1, dim >= 0 && dim < rank,
        absl::StrCat("must be a dimension of operand 0 (rank ", rank, ")")));
    std::vector<int64_t> expected = shape;
    if (instruction.opcode == Opcode::AllGather) {
      expected[dim] *= size;
    } else {
      if (shape[dim] % size != 0)
        return error(absl::StrCat(
            "operand 0 has size ", shape[dim], " along dimension ", dim,
            ", which the ", size, " ranks of group ", group, " ",
            formatAxes(program.groups[group]), " do not divide"));
      expected[dim] /= size;
    }
    return resultShape(0, exactly(expected));
  }

  absl::Status checkAdamW() {
    const std::vector<float> &f = instruction.floatAttrs;
    MOE_VERIFY_OK(requireFloat(0, f[0] >= 0 && f[0] < 1, "must be in [0, 1)"));
    MOE_VERIFY_OK(requireFloat(1, f[1] >= 0 && f[1] < 1, "must be in [0, 1)"));
    MOE_VERIFY_OK(requireFloat(2, f[2] > 0, "must be > 0"));
    MOE_VERIFY_OK(requireFloat(3, f[3] >= 0, "must be >= 0"));
    MOE_VERIFY_OK(requireKind(0, BufferKind::Parameter));
    // The flag says how the parameter is trained (moec clears it for norm
    // weights); an update that decays it anyway contradicts the artifact.
    if (!operand(0).weightDecay)
      MOE_VERIFY_OK(requireFloat(
          3, f[3] == 0,
          absl::StrCat("must be 0 for operand 0 (",
                       describeBuffer(program, instruction.operands[0]),
                       "), whose weight_decay flag is false")));
    MOE_VERIFY_OK(requireKind(2, BufferKind::OptimizerState));
    MOE_VERIFY_OK(requireKind(3, BufferKind::OptimizerState));
    if (instruction.operands[2] == instruction.operands[3])
      return error("exp_avg and exp_avg_sq (operands 2 and 3) must be "
                   "distinct buffers");
    // The moments are updated element for element with the parameter, so
    // each rank must hold the same block of all three.
    for (size_t i : {2, 3})
      if (operand(i).split != operand(0).split)
        return error(absl::StrCat(
            "operand ", i, " (",
            describeBuffer(program, instruction.operands[i]), ") is split ",
            formatSplit(operand(i).split), " but operand 0 (",
            describeBuffer(program, instruction.operands[0]), ") is split ",
            formatSplit(operand(0).split)));
    ShapePattern same = exactly(operand(0).shape);
    for (size_t i : {1, 2, 3})
      MOE_VERIFY_OK(operandShape(i, same));
    for (size_t i : {4, 5, 6})
      MOE_VERIFY_OK(operandShape(i, {}));
    return absl::OkStatus();
  }

  const Program &program;
  size_t index;
  const Instruction &instruction;
  ShapeMatcher shapes;
};

} // namespace

absl::Status verifyInstruction(const Program &program, size_t index) {
  return InstructionChecker(program, index).check();
}

bool allowsInPlace(Opcode opcode) {
  switch (opcode) {
  // Kernels documented as alias-safe (Kernels.h).
  case Opcode::Add:
  case Opcode::Rope:
  case Opcode::RopeGrad:
  case Opcode::SwigluGrad:
  // Scalar ops the executor computes before writing the result.
  case Opcode::WeightedSum:
  case Opcode::GlobalNorm:
  case Opcode::ClipCoefficient:
    return true;
  default:
    return false;
  }
}

} // namespace moe::rt::verifier
