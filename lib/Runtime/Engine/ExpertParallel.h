//===- ExpertParallel.h - experts distributed over a group ------*- C++ -*-===//
//
// Private to the executor: Experts and ExpertsGrad with a group attribute
// (Program.fbs). Group rank r holds experts [r * El, (r + 1) * El) of the
// E = El * size global ones, and every rank routes its own tokens: each
// assignment's row travels to the rank of its expert (an all-to-all), runs
// through the expert there with the CPU kernels, and its result travels back
// (the reverse all-to-all).
//
// The result is the single-rank kernels' on the group's tokens: an expert
// sees its rows in (source rank, token) order, the order of the gathered
// tokens, and each token adds its experts' outputs in global expert order,
// as cpu::expertsForward/expertsBackward do. On a group of one it is
// bitwise the plain kernels' result.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ENGINE_EXPERTPARALLEL_H
#define MOE_LIB_RUNTIME_ENGINE_EXPERTPARALLEL_H

#include "Dispatch.h"

#include "moe/Runtime/Cpu/Kernels.h"

#include <optional>

namespace moe::rt::engine {

/// Whether instruction `index` (Experts or ExpertsGrad) names a group.
bool isExpertParallel(const Instruction &instruction);

/// The most scratch memory one of the program's Experts, ExpertsGrad,
/// Attention, AttentionGrad or fused LM head instructions allocates (cpu::
/// expertsWorkspaceBytes, attentionWorkspaceBytes) on the kernels' threads
/// (cpu::numThreads): they run one at a time.
/// With `pipelineRank`, only the instructions of that rank's stages (and
/// those every rank runs, stage -1) count.
uint64_t
kernelWorkspaceBytes(const Program &program,
                     std::optional<int32_t> pipelineRank = std::nullopt);

/// The FP8 recipe of an (verified) Experts or ExpertsGrad instruction's
/// GEMMs, from its float attributes; none when it has none. With the
/// step's `context`, delayed scaling points at the instruction's amax
/// history.
std::optional<cpu::Fp8Gemms> fp8GemmsOf(const Instruction &instruction,
                                        const StepContext *context = nullptr);

/// Runs Experts or ExpertsGrad instruction `index` (isExpertParallel) over
/// its group: a collective call of the group. Fails on an expert id
/// outside [-1, E) on any rank of the group (on every rank alike, so none
/// is left waiting in an exchange) and on communication errors.
absl::Status runExpertParallel(const StepContext &context, size_t index);

} // namespace moe::rt::engine

#endif // MOE_LIB_RUNTIME_ENGINE_EXPERTPARALLEL_H
