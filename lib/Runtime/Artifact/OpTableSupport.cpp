//===- OpTableSupport.cpp - reading the op table's attribute layouts ------===//
//
// The generic half of the op table: which of an opcode's layouts an
// instruction's attribute counts select. The table itself is generated
// (OpTable.cpp in the build tree).
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Artifact/OpTable.h"

namespace moe::rt::ops {

namespace {
bool countMatches(int expected, size_t found, size_t operands) {
  return expected < 0 ? found == operands
                      : found == static_cast<size_t>(expected);
}
} // namespace

std::optional<const AttrLayout *>
findAttrLayout(const Instruction &instruction) {
  const OpInfo &info = opInfo(instruction.opcode);
  size_t ints = instruction.intAttrs.size();
  size_t floats = instruction.floatAttrs.size();
  if (info.numLayouts == 0) {
    if (ints == 0 && floats == 0)
      return nullptr;
    return std::nullopt;
  }
  size_t operands = instruction.operands.size();
  for (size_t i = 0; i < info.numLayouts; ++i) {
    const AttrLayout &layout = info.layouts[i];
    if (countMatches(layout.ints, ints, operands) &&
        countMatches(layout.floats, floats, operands))
      return &layout;
  }
  return std::nullopt;
}

bool communicatesOverGroup(const Instruction &instruction) {
  const OpInfo &info = opInfo(instruction.opcode);
  if (!info.communicates)
    return false;
  std::optional<const AttrLayout *> layout = findAttrLayout(instruction);
  if (!layout || !*layout)
    return false;
  for (size_t a = 0; a < info.numAttrs; ++a)
    if ((info.attrs[a].kind == AttrKind::Group ||
         info.attrs[a].kind == AttrKind::GroupOrNone) &&
        (*layout)->slots[a] >= 0)
      return true;
  return false;
}

std::vector<int64_t> groupsOf(const Instruction &instruction) {
  std::vector<int64_t> groups;
  const OpInfo &info = opInfo(instruction.opcode);
  std::optional<const AttrLayout *> layout = findAttrLayout(instruction);
  if (!layout || !*layout)
    return groups;
  for (size_t a = 0; a < info.numAttrs; ++a) {
    const AttrInfo &attr = info.attrs[a];
    if (attr.kind != AttrKind::Group && attr.kind != AttrKind::GroupOrNone)
      continue;
    // A per-operand attribute is the only one of its vector: all of it.
    if (attr.perOperand) {
      for (int64_t group : instruction.intAttrs)
        if (group >= 0)
          groups.push_back(group);
    } else if (int slot = (*layout)->slots[a];
               slot >= 0 && instruction.intAttrs[slot] >= 0) {
      groups.push_back(instruction.intAttrs[slot]);
    }
  }
  return groups;
}

const char *enumCaseName(const EnumInfo &info, int64_t value) {
  for (size_t i = 0; i < info.numCases; ++i)
    if (info.cases[i].value == value)
      return info.cases[i].name;
  return nullptr;
}

} // namespace moe::rt::ops
