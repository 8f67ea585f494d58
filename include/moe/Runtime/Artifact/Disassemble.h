//===- Disassemble.h - a verified program as text ---------------*- C++ -*-===//
//
// moe-run --describe: the buffers and the instructions of an artifact, each
// instruction with its operands, results and attributes named as the op
// table (OpTable.td) names them, enum attributes by their case names.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ARTIFACT_DISASSEMBLE_H
#define MOE_RUNTIME_ARTIFACT_DISASSEMBLE_H

#include "moe/Runtime/Program.h"

#include <string>

namespace moe::rt {

/// The text of a verified program, one buffer or instruction per line.
std::string disassemble(const Program &program);

/// One instruction: "Attention(q: %3, k: %4, v: %5) -> (out: %6, lse: %7)
/// {heads = 4, kv_heads = 2}".
std::string disassembleInstruction(const Instruction &instruction);

} // namespace moe::rt

#endif // MOE_RUNTIME_ARTIFACT_DISASSEMBLE_H
