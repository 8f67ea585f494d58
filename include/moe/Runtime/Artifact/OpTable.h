//===- OpTable.h - the op table as data -------------------------*- C++ -*-===//
//
// What OpTable.td says about each opcode, as data the verifier, the
// disassembler and the load-time table check read (kOpTable is generated,
// OpTable.cpp in the build tree). The per-opcode code, views, builders and
// the dispatcher, is OpViews.h.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ARTIFACT_OPTABLE_H
#define MOE_RUNTIME_ARTIFACT_OPTABLE_H

#include "moe/Runtime/Program.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace moe::rt::ops {

constexpr uint32_t dtypeBit(DType dtype) {
  return 1u << static_cast<uint32_t>(dtype);
}

/// An operand or result.
struct ValueInfo {
  const char *name;
  uint32_t dtypes;  // dtypeBit of each dtype allowed
  int dtypeOf;      // the operand whose dtype it must have, or -1
  bool optional;    // may be left out (the last operand only)
  bool variadic;    // any number >= 1 (the last operand only)
};

enum class AttrKind : uint8_t { Int, Float, Bool, Enum, Group, GroupOrNone };

struct EnumCaseInfo {
  const char *name;
  int64_t value;
};
struct EnumInfo {
  const char *name;
  const EnumCaseInfo *cases;
  size_t numCases;
};

struct AttrInfo {
  const char *name;
  AttrKind kind;
  int optionalSet;  // -1: always present
  bool perOperand;  // one value per operand
  const EnumInfo *enumInfo;
  /// Int, Bool, Enum and Group attributes are in Instruction::intAttrs,
  /// Float ones in floatAttrs.
  bool inFloats() const { return kind == AttrKind::Float; }
};

/// The most attributes one opcode has.
inline constexpr size_t kMaxAttrs = 16;

/// One way an opcode's attributes can be present: the int and float counts
/// (-1: one per operand), the optional sets present (bit i: set i), and
/// each attribute's index in its vector (-1: absent).
struct AttrLayout {
  int ints, floats;
  uint32_t presentSets;
  int slots[kMaxAttrs];
};

struct OpInfo {
  const char *name;
  Opcode opcode;
  const char *version;  // the artifact version that introduced it
  const ValueInfo *operands;
  size_t numOperands;
  const ValueInfo *results;
  size_t numResults;
  const AttrInfo *attrs;
  size_t numAttrs;
  const AttrLayout *layouts;
  size_t numLayouts;
  bool inPlace;  // the kernel may write a result over an operand
  /// With a group attribute, the kernel communicates over the group.
  bool communicates;
  /// A fingerprint of its number, name, operands, results and attribute
  /// encoding (not its shape rules): an artifact records it for each
  /// opcode it uses, so that one written with another table is refused.
  uint64_t layoutHash;
};

/// Indexed by opcode value.
extern const OpInfo kOpTable[kNumOpcodes];

/// The table's entry for a value the verifier has checked is in range.
inline const OpInfo &opInfo(Opcode opcode) {
  return kOpTable[static_cast<size_t>(opcode)];
}

/// The layout of the instruction's attributes, if its attribute counts are
/// one of its opcode's (null for an opcode without attributes).
std::optional<const AttrLayout *> findAttrLayout(const Instruction &instruction);

/// Whether the instruction communicates over one of the mesh's groups: it
/// carries a group attribute (GroupOrNone: any value, as a list) and its
/// opcode communicates over it.
bool communicatesOverGroup(const Instruction &instruction);

/// The groups (indices into Program.groups) the instruction's group
/// attributes name, in attribute order, without "none" (-1): those it
/// communicates over when communicatesOverGroup.
std::vector<int64_t> groupsOf(const Instruction &instruction);

/// The name of an enum attribute's value, or null when it has none.
const char *enumCaseName(const EnumInfo &info, int64_t value);

} // namespace moe::rt::ops

#endif // MOE_RUNTIME_ARTIFACT_OPTABLE_H
