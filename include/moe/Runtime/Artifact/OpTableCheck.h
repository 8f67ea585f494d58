//===- OpTableCheck.h - the op table an artifact was written with -*- C++ -*-===//
//
// An artifact records, for each opcode it uses, the name and layout
// fingerprint its writer's op table gives that number (Program.opcodes,
// version 3.0). The reader refuses a file whose record disagrees with its
// own table, so that an artifact from a moec with renumbered or changed
// opcodes (say Rope and RopeGrad swapped) fails at load, naming the opcode,
// instead of running the wrong kernels.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ARTIFACT_OPTABLECHECK_H
#define MOE_RUNTIME_ARTIFACT_OPTABLECHECK_H

#include "moe/Runtime/Artifact/Program_generated.h"
#include "moe/Runtime/Program.h"

#include "absl/status/status.h"

#include <string>
#include <vector>

namespace moe::rt::artifact {

using OpcodeEntries =
    std::vector<flatbuffers::Offset<moe::artifact::OpcodeEntry>>;

/// Program.opcodes for a program whose instructions have `opcodes`: one
/// entry per distinct opcode, in opcode order, from this build's table.
OpcodeEntries writeOpcodeEntries(flatbuffers::FlatBufferBuilder &fbb,
                                 const std::vector<Opcode> &opcodes);

/// Checks a verified-by-FlatBuffers file's Program.opcodes against this
/// build's table; `origin` names the file.
absl::Status checkOpcodeEntries(const moe::artifact::Program &root,
                                const std::string &origin);

} // namespace moe::rt::artifact

#endif // MOE_RUNTIME_ARTIFACT_OPTABLECHECK_H
