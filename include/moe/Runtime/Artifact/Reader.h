//===- Reader.h - load and verify a .moebin artifact ------------*- C++ -*-===//
//
// The runtime trusts nothing in a file: it checks the size and identifier,
// runs the FlatBuffers verifier, checks the version, and then checks every
// buffer and instruction (indices in range, dtypes, shapes consistent per
// opcode, attribute counts, arena bounds). Every error names the file and the
// buffer or instruction index it is about.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ARTIFACT_READER_H
#define MOE_RUNTIME_ARTIFACT_READER_H

#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>

namespace moe::rt {

/// Reads and fully verifies the artifact at `path`.
absl::StatusOr<Program> readArtifact(const std::string &path);

/// Verifies `size` bytes of an artifact held in memory; `origin` names it in
/// error messages (a path, or "<memory>").
absl::StatusOr<Program> parseArtifact(const uint8_t *data, size_t size,
                                      const std::string &origin);

/// Semantic checks of an already-decoded program (indices, shapes per
/// opcode, attributes, arena). Exposed so tests can corrupt a Program.
absl::Status verifyProgram(const Program &program);

} // namespace moe::rt

#endif // MOE_RUNTIME_ARTIFACT_READER_H
