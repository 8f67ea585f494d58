//===- Program.cpp - opcode names and buffer sizes ------------------------===//
//
// The small helpers of moe::rt::Program that every runtime component needs:
// readable opcode names for messages, a buffer's element count and the
// mesh arithmetic of a partitioned program.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Program.h"
#include "moe/Runtime/Artifact/OpTable.h"

#include "absl/strings/str_cat.h"

namespace moe::rt {

const char *opcodeName(Opcode opcode) {
  auto index = static_cast<size_t>(opcode);
  // An artifact's opcode is only range-checked by the verifier, which itself
  // needs a name for the out-of-range value it reports.
  if (index >= static_cast<size_t>(kNumOpcodes))
    return "<invalid opcode>";
  return ops::kOpTable[index].name;
}

int64_t Buffer::numElements() const {
  // The verifier rejects negative dims and products that overflow, so a
  // plain product is exact for every buffer the runtime ever sees.
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

int64_t Program::numRanks() const {
  int64_t ranks = 1;
  for (int64_t size : meshShape)
    ranks *= size;
  return ranks;
}

int64_t Program::partsOf(const AxisList &axes) const {
  int64_t parts = 1;
  for (const std::string &axis : axes)
    for (size_t i = 0; i < meshAxes.size() && i < meshShape.size(); ++i)
      if (meshAxes[i] == axis)
        parts *= meshShape[i];
  return parts;
}

int64_t Program::balancedSplitOf(const AxisList &axes) const {
  if (axes.empty() || axes.front() != kContextAxis)
    return 1;
  return partsOf({axes.front()});
}

std::string Program::meshDescription() const {
  if (meshAxes.empty())
    return "1 rank";
  std::string text;
  for (size_t i = 0; i < meshAxes.size(); ++i) {
    if (i > 0)
      text += " x ";
    text += meshAxes[i] + "=" +
            (i < meshShape.size() ? std::to_string(meshShape[i]) : "?");
  }
  return text;
}

std::vector<int64_t> Program::lastWriters() const {
  std::vector<int64_t> writer(buffers.size(), -1);
  for (size_t i = 0; i < instructions.size(); ++i)
    for (uint32_t result : instructions[i].results)
      if (result < writer.size())
        writer[result] = static_cast<int64_t>(i);
  return writer;
}

std::string describeInstruction(const Program &program, size_t index) {
  const Instruction &instruction = program.instructions[index];
  std::string text = absl::StrCat("instruction ", index, " (",
                                  opcodeName(instruction.opcode), ")");
  if (!instruction.location.empty())
    absl::StrAppend(&text, " at ", instruction.location);
  return text;
}

std::string describeIdPosition(const Buffer &ids, int64_t position) {
  std::string text = absl::StrCat("position ", position);
  if (ids.shape.size() == 2 && ids.shape[1] > 0)
    absl::StrAppend(&text, " (batch ", position / ids.shape[1], ", seq ",
                    position % ids.shape[1], ")");
  return text;
}

} // namespace moe::rt
