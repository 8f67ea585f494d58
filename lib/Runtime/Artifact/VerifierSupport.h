//===- VerifierSupport.h - shared pieces of the program verifier -*- C++
//-*-===//
//
// Private to lib/Runtime/Artifact: the message formatting every check uses
// (so that all errors name their buffer or instruction the same way) and the
// entry points of the verifier's passes.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ARTIFACT_VERIFIERSUPPORT_H
#define MOE_LIB_RUNTIME_ARTIFACT_VERIFIERSUPPORT_H

#include "moe/Runtime/Program.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <string>
#include <vector>

/// Propagates a non-OK absl::Status out of the enclosing function.
#define MOE_VERIFY_OK(expr)                                                    \
  do {                                                                         \
    if (absl::Status moeVerifyStatus = (expr); !moeVerifyStatus.ok())          \
      return moeVerifyStatus;                                                  \
  } while (false)

namespace moe::rt::verifier {

/// "[64, 32]", or "[]" for a scalar.
std::string formatShape(const std::vector<int64_t> &shape);
/// "{dp,tp}", or "{}" for no axes.
std::string formatAxes(const AxisList &axes);
/// A buffer's split: "[{fsdp}, {}]", or "unsplit" when it has none.
std::string formatSplit(const std::vector<AxisList> &split);
/// "bf16", or "dtype 9" for a value the schema does not define (DType.h).
using ::moe::rt::dtypeName;
/// "parameter", "optimizer state", "input", "temporary".
std::string kindName(BufferKind kind);
/// "a parameter", "an optimizer state", "an input", "a temporary".
std::string withArticle(BufferKind kind);
/// "buffer 5 'lm_head.weight'" (the name is left out when empty).
std::string describeBuffer(const Program &program, uint32_t index);

/// An error about buffer `index`: "buffer 5 'x': <message>".
absl::Status bufferError(const Program &program, uint32_t index,
                         absl::string_view message);
/// An error about instruction `index`: "instruction 12 (Linear): <message>",
/// followed by the instruction's source location when it has one.
absl::Status instructionError(const Program &program, size_t index,
                              absl::string_view message);

/// The mesh, its groups, the batch axes and every buffer's split: axes
/// known and unique, sizes positive. Assumes every buffer passed its own
/// checks; instruction rules rely on it for group sizes.
absl::Status verifyMesh(const Program &program);

/// Operand/result counts, indices, dtypes, attributes and shapes of one
/// instruction. Assumes every buffer already passed its own checks.
absl::Status verifyInstruction(const Program &program, size_t index);

/// Cross-instruction checks: reads of unwritten temporaries, results that
/// would overwrite persistent state, provenance of expert ids, optimizer
/// state shared between updates, and arena overlap of live temporaries.
/// Assumes every instruction passed verifyInstruction.
absl::Status verifyDataflow(const Program &program);

/// Microbatches and pipeline stages (version 1.2): the stages, the
/// schedule, and that running per stage and phase in the schedule's order
/// computes what program order would. Assumes verifyInstruction passed;
/// verifyDataflow assumes this passed.
absl::Status verifyPipeline(const Program &program);

/// For each buffer of a verified pipelined program, the pipeline ranks that
/// write or read it in their arenas: the ranks of its writer's and readers'
/// stages (all of them for stage -1), except that the global norm reads
/// only its own rank's gradients. Every rank for a plain program.
std::vector<std::vector<bool>> pipelineRanksHolding(const Program &program);

/// Whether the kernel behind `opcode` may write a result over one of its
/// operands (same memory). Only such instructions may reuse, for a result,
/// the arena range of an operand they read for the last time.
bool allowsInPlace(Opcode opcode);

} // namespace moe::rt::verifier

#endif // MOE_LIB_RUNTIME_ARTIFACT_VERIFIERSUPPORT_H
