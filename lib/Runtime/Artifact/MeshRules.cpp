//===- MeshRules.cpp - checks of the mesh and of splits over it -----------===//
//
// A partitioned program (version 1.1) names mesh axes in three places: its
// groups, its batch axes and the splits of its persistent buffers. The
// executor turns each into rank arithmetic (group members, the rows this
// rank samples, the global index of a block's elements), so an unknown or
// repeated axis would silently make ranks disagree about which data they
// hold. The mesh itself must be one comm::Mesh accepts: unique, non-empty
// names and positive sizes whose product MPI can number.
//
//===----------------------------------------------------------------------===//

#include "VerifierSupport.h"

#include <limits>
#include <set>

namespace moe::rt::verifier {
namespace {

absl::Status meshError(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("mesh: ", message));
}

/// The axes of the mesh itself.
absl::Status verifyMeshAxes(const Program &program) {
  if (program.meshAxes.size() != program.meshShape.size())
    return meshError(absl::StrCat(program.meshAxes.size(), " axis names but ",
                                  program.meshShape.size(), " sizes"));
  std::set<std::string> seen;
  int64_t ranks = 1;
  for (size_t i = 0; i < program.meshAxes.size(); ++i) {
    const std::string &axis = program.meshAxes[i];
    int64_t size = program.meshShape[i];
    if (axis.empty())
      return meshError(absl::StrCat("axis ", i, " has an empty name"));
    if (!seen.insert(axis).second)
      return meshError(absl::StrCat("axis '", axis, "' appears twice"));
    if (size <= 0)
      return meshError(absl::StrCat("axis '", axis, "' has size ", size,
                                    ", expected a positive size"));
    // Ranks are MPI ranks, which are ints.
    if (size > std::numeric_limits<int32_t>::max() / ranks)
      return meshError(
          absl::StrCat(program.meshDescription(), " has more ranks than the ",
                       std::numeric_limits<int32_t>::max(), " MPI can number"));
    ranks *= size;
  }
  return absl::OkStatus();
}

/// `axes` are axes of the mesh, none twice; `what` names the list in the
/// message ("group 2", "the batch axes").
absl::Status verifyAxisList(const Program &program, const AxisList &axes,
                            absl::string_view what) {
  std::set<std::string> seen;
  for (const std::string &axis : axes) {
    bool known = false;
    for (const std::string &meshAxis : program.meshAxes)
      known |= meshAxis == axis;
    if (!known)
      return meshError(absl::StrCat(what, " ", formatAxes(axes),
                                    " names axis '", axis,
                                    "', which is not an axis of the mesh (",
                                    program.meshDescription(), ")"));
    if (!seen.insert(axis).second)
      return meshError(absl::StrCat(what, " ", formatAxes(axes),
                                    " names axis '", axis, "' twice"));
  }
  return absl::OkStatus();
}

/// A split describes the blocks of a persistent tensor: one entry per
/// dimension, every axis used by at most one dimension (an axis splitting
/// two dimensions would give a rank two different block indices along it).
absl::Status verifySplit(const Program &program, uint32_t index) {
  const Buffer &buffer = program.buffers[index];
  if (buffer.split.empty())
    return absl::OkStatus();
  // A working copy is split as its master (checked with the working
  // copies): each rank rounds its own block.
  if (buffer.kind != BufferKind::Parameter &&
      buffer.kind != BufferKind::OptimizerState &&
      buffer.kind != BufferKind::WorkingCopy)
    return bufferError(program, index,
                       absl::StrCat(withArticle(buffer.kind),
                                    " cannot be split; only parameters, "
                                    "optimizer state and working copies are"));
  if (buffer.split.size() != buffer.shape.size())
    return bufferError(program, index,
                       absl::StrCat("split ", formatSplit(buffer.split),
                                    " has ", buffer.split.size(),
                                    " entries for shape ",
                                    formatShape(buffer.shape),
                                    ", expected one per dimension"));
  std::set<std::string> used;
  int64_t globalCount = 1;
  for (size_t d = 0; d < buffer.split.size(); ++d) {
    for (const std::string &axis : buffer.split[d]) {
      bool known = false;
      for (const std::string &meshAxis : program.meshAxes)
        known |= meshAxis == axis;
      if (!known)
        return bufferError(program, index,
                           absl::StrCat("split ", formatSplit(buffer.split),
                                        " names axis '", axis,
                                        "', which is not an axis of the mesh (",
                                        program.meshDescription(), ")"));
      if (!used.insert(axis).second)
        return bufferError(program, index,
                           absl::StrCat("split ", formatSplit(buffer.split),
                                        " uses axis '", axis, "' twice"));
    }
    // Initialisation numbers the elements of the whole tensor, so its
    // element count must fit in int64 like a local one.
    int64_t globalDim = 0;
    if (__builtin_mul_overflow(buffer.shape[d],
                               program.partsOf(buffer.split[d]), &globalDim) ||
        __builtin_mul_overflow(globalCount, globalDim, &globalCount))
      return bufferError(
          program, index,
          absl::StrCat("the whole tensor of split ", formatSplit(buffer.split),
                       " with blocks of shape ", formatShape(buffer.shape),
                       " has more elements than int64 can count"));
  }
  return absl::OkStatus();
}

} // namespace

absl::Status verifyMesh(const Program &program) {
  MOE_VERIFY_OK(verifyMeshAxes(program));
  for (size_t g = 0; g < program.groups.size(); ++g)
    MOE_VERIFY_OK(
        verifyAxisList(program, program.groups[g], absl::StrCat("group ", g)));
  MOE_VERIFY_OK(verifyAxisList(program, program.batchAxes, "the batch axes"));
  for (uint32_t index = 0; index < program.buffers.size(); ++index)
    MOE_VERIFY_OK(verifySplit(program, index));
  return absl::OkStatus();
}

} // namespace moe::rt::verifier
