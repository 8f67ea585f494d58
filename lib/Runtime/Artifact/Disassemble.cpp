//===- Disassemble.cpp - a verified program as text -----------------------===//
//
// Generic over the op table: every name printed comes from it, so a new
// opcode disassembles without code here.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Artifact/Disassemble.h"
#include "moe/Runtime/Artifact/OpTable.h"

#include "VerifierSupport.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moe::rt {
namespace {

std::string initText(const Buffer &buffer) {
  switch (buffer.init) {
  case Init::None:
    return "";
  case Init::Zeros:
    return " init zeros";
  case Init::Ones:
    return " init ones";
  case Init::Normal:
    return absl::StrCat(" init normal(std ", buffer.initStd, ")");
  }
  return "";
}

std::string bufferLine(const Program &program, size_t b) {
  const Buffer &buffer = program.buffers[b];
  std::string line = absl::StrCat(
      "  %", b, " '", buffer.name, "' ", verifier::kindName(buffer.kind), " ",
      verifier::dtypeName(buffer.dtype), verifier::formatShape(buffer.shape));
  if (buffer.kind == BufferKind::Temporary)
    absl::StrAppend(&line, " @", buffer.offset);
  absl::StrAppend(&line, initText(buffer));
  if (buffer.kind == BufferKind::WorkingCopy)
    absl::StrAppend(&line, " of %", buffer.master);
  if (buffer.kind == BufferKind::Parameter && buffer.weightDecay)
    absl::StrAppend(&line, " weight_decay");
  if (!buffer.split.empty())
    absl::StrAppend(&line, " split ", verifier::formatSplit(buffer.split));
  return line;
}

/// "name: %3", or "name: %3, %4" for a variadic operand.
std::string values(const std::vector<uint32_t> &indices,
                   const ops::ValueInfo *infos, size_t count) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < indices.size() && count > 0; ++i) {
    const ops::ValueInfo &info = infos[std::min(i, count - 1)];
    if (info.variadic && i >= count) {
      absl::StrAppend(&parts.back(), ", %", indices[i]);
      continue;
    }
    parts.push_back(absl::StrCat(info.name, ": %", indices[i]));
  }
  return absl::StrJoin(parts, ", ");
}

std::string attrValue(const Instruction &instruction, const ops::AttrInfo &attr,
                      size_t slot) {
  if (attr.inFloats())
    return absl::StrCat(instruction.floatAttrs[slot]);
  int64_t value = instruction.intAttrs[slot];
  switch (attr.kind) {
  case ops::AttrKind::Bool:
    return value ? "true" : "false";
  case ops::AttrKind::Enum:
    if (const char *name = ops::enumCaseName(*attr.enumInfo, value))
      return name;
    break;
  case ops::AttrKind::GroupOrNone:
    if (value == -1)
      return "none";
    break;
  default:
    break;
  }
  return absl::StrCat(value);
}

} // namespace

std::string disassembleInstruction(const Instruction &instruction) {
  const ops::OpInfo &info = ops::opInfo(instruction.opcode);
  std::string text = absl::StrCat(
      info.name, "(", values(instruction.operands, info.operands, info.numOperands),
      ") -> (", values(instruction.results, info.results, info.numResults), ")");
  std::optional<const ops::AttrLayout *> layout =
      ops::findAttrLayout(instruction);
  if (!layout || !*layout)
    return text;
  std::vector<std::string> attrs;
  for (size_t a = 0; a < info.numAttrs; ++a) {
    const ops::AttrInfo &attr = info.attrs[a];
    int slot = (*layout)->slots[a];
    if (slot < 0)
      continue;
    if (!attr.perOperand) {
      attrs.push_back(
          absl::StrCat(attr.name, " = ", attrValue(instruction, attr, slot)));
      continue;
    }
    size_t count = attr.inFloats() ? instruction.floatAttrs.size()
                                   : instruction.intAttrs.size();
    std::vector<std::string> each;
    for (size_t i = 0; i < count; ++i)
      each.push_back(attrValue(instruction, attr, i));
    attrs.push_back(
        absl::StrCat(attr.name, " = [", absl::StrJoin(each, ", "), "]"));
  }
  if (!attrs.empty())
    absl::StrAppend(&text, " {", absl::StrJoin(attrs, ", "), "}");
  return text;
}

std::string disassemble(const Program &program) {
  std::string text = absl::StrCat(
      "artifact version ", program.versionMajor, ".", program.versionMinor,
      " by ", program.producer.empty() ? "?" : program.producer, ": model '",
      program.model.name, "', ", program.meshDescription(), ", arena ",
      program.arenaBytes, " bytes, seed ", program.seed, "\n");
  if (!program.groups.empty()) {
    absl::StrAppend(&text, "groups (", program.groups.size(), "):\n");
    for (size_t g = 0; g < program.groups.size(); ++g)
      absl::StrAppend(&text, "  ", g, " ",
                      verifier::formatAxes(program.groups[g]), "\n");
  }
  absl::StrAppend(&text, "buffers (", program.buffers.size(), "):\n");
  for (size_t b = 0; b < program.buffers.size(); ++b)
    absl::StrAppend(&text, bufferLine(program, b), "\n");
  absl::StrAppend(&text, "instructions (", program.instructions.size(),
                  "):\n");
  const Pipeline &pipeline = program.pipeline;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &instruction = program.instructions[i];
    absl::StrAppend(&text, "  ", i, " ", disassembleInstruction(instruction));
    if (pipeline.enabled() && i < pipeline.instructionStage.size())
      absl::StrAppend(&text, " stage ", pipeline.instructionStage[i]);
    if (!instruction.location.empty())
      absl::StrAppend(&text, "  // ", instruction.location);
    absl::StrAppend(&text, "\n");
  }
  absl::StrAppend(&text, "outputs: loss %", program.loss, ", grad_norm %",
                  program.gradNorm, ", lr %", program.lr, "; inputs: tokens %",
                  program.tokens, ", targets %", program.targets);
  if (program.positions >= 0)
    absl::StrAppend(&text, ", positions %", program.positions);
  absl::StrAppend(&text, ", step %", program.step, "\n");
  return text;
}

} // namespace moe::rt
