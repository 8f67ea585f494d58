//===- OpTableCheck.cpp - record and check an artifact's op table ---------===//

#include "moe/Runtime/Artifact/OpTableCheck.h"
#include "moe/Runtime/Artifact/OpTable.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <algorithm>

namespace moe::rt::artifact {

namespace fb = moe::artifact;

OpcodeEntries writeOpcodeEntries(flatbuffers::FlatBufferBuilder &fbb,
                                 const std::vector<Opcode> &opcodes) {
  std::vector<bool> used(kNumOpcodes, false);
  for (Opcode opcode : opcodes)
    used[static_cast<size_t>(opcode)] = true;
  OpcodeEntries entries;
  for (size_t value = 0; value < used.size(); ++value) {
    if (!used[value])
      continue;
    const ops::OpInfo &info = ops::kOpTable[value];
    entries.push_back(fb::CreateOpcodeEntry(
        fbb, static_cast<fb::Opcode>(value), fbb.CreateString(info.name),
        info.layoutHash));
  }
  return entries;
}

absl::Status checkOpcodeEntries(const fb::Program &root,
                                const std::string &origin) {
  auto refuse = [&](const std::string &message) {
    return absl::FailedPreconditionError(
        absl::StrCat("artifact '", origin, "': ", message,
                     " (recompile with this moec)"));
  };
  std::vector<bool> recorded(kNumOpcodes, false);
  if (const auto *entries = root.opcodes())
    for (const fb::OpcodeEntry *entry : *entries) {
      auto value = static_cast<size_t>(entry->opcode());
      std::string name = entry->name() ? entry->name()->str() : "";
      if (value >= static_cast<size_t>(kNumOpcodes))
        return refuse(absl::StrCat("it uses opcode ", value, " ('", name,
                                   "'), which this runtime's op table does "
                                   "not have"));
      const ops::OpInfo &info = ops::kOpTable[value];
      if (name != info.name)
        return refuse(absl::StrCat(
            "opcode ", value, " is '", name,
            "' in the op table it was written with, but '", info.name,
            "' in this runtime's"));
      if (entry->layout() != info.layoutHash)
        return refuse(absl::StrFormat(
            "opcode %d (%s) has another operand or attribute layout in the "
            "op table it was written with (fingerprint %016x, this "
            "runtime's %016x)",
            value, info.name, entry->layout(), info.layoutHash));
      recorded[value] = true;
    }
  if (const auto *instructions = root.instructions())
    for (size_t i = 0; i < instructions->size(); ++i) {
      auto value = static_cast<size_t>(instructions->Get(i)->opcode());
      if (value < recorded.size() && !recorded[value])
        return refuse(absl::StrCat("instruction ", i, " uses opcode ", value,
                                   " (", ops::kOpTable[value].name,
                                   "), which the file's op table does not "
                                   "record"));
    }
  return absl::OkStatus();
}

} // namespace moe::rt::artifact
