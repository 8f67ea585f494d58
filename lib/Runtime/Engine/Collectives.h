//===- Collectives.h - collective instructions on the mesh ------*- C++ -*-===//
//
// Private to the executor: the collective instructions of a partitioned
// program on the groups of its mesh. The communication layer works on
// contiguous buffers, i.e. on blocks along dimension 0; a collective along
// another dimension packs the blocks into (or unpacks them out of) the
// step's pack space around the call.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ENGINE_COLLECTIVES_H
#define MOE_LIB_RUNTIME_ENGINE_COLLECTIVES_H

#include "Dispatch.h"

#include <cstdint>

namespace moe::rt::engine {

/// Whether `opcode` is one of the collectives (AllReduce, AllGather,
/// ReduceScatter, Slice, ReduceBucket).
bool isCollective(Opcode opcode);

/// The pack space (in elements) collective `inst` needs (0: none).
int64_t packElementsOf(const Program &program, const Instruction &inst);

/// The pack space (in elements) the program's collectives need: the size of
/// the largest gathered or scattered buffer whose dimension has non-trivial
/// dimensions before it, or the packing of the largest bucket and its
/// scattered part (0 when there is none).
int64_t packElements(const Program &program);

/// Runs collective instruction `index` (isCollective) on its group.
absl::Status runCollective(const StepContext &context, size_t index);

/// Runs Fp8AmaxUpdate instruction `index`: this step's amaxes become the
/// maximum over the group (if it names one, a collective call of the
/// group), so that every copy of the history stays the same, and then
/// every history moves one step on (cpu::rollAmaxHistory).
absl::Status runFp8AmaxUpdate(const StepContext &context, size_t index);

/// ZeRO-1's gather: this rank's updated rows `block` (`count` fp32
/// elements, its block of dimension 0) into `whole`, the copy every rank of
/// `group` holds, in `dtype` (F32, or BF16 rounded to nearest even), all
/// ranks' blocks in group order. A collective call of the group.
absl::Status gatherRows(comm::Group &group, const float *block, int64_t count,
                        void *whole, DType dtype);

/// Runs PipelineGradientSum instruction `index` in a pipelined step's
/// optimizer: exchanges this stage's half of a shared parameter's gradient
/// with the stage computing the other (StageGradientSum.cpp) and adds them.
absl::Status runPipelineGradientSum(const StepContext &context, size_t index);

} // namespace moe::rt::engine

#endif // MOE_LIB_RUNTIME_ENGINE_COLLECTIVES_H
