//===- Placement.h - this rank's place in a program's mesh ------*- C++ -*-===//
//
// The rank arithmetic of a partitioned program (the executor's, and the
// checkpoints', which reshard from the mesh that saved them).
// Ranks are numbered row-major over the mesh axes (the last fastest), as in
// comm::Mesh. A list of axes (a group, a split dimension, the batch axes)
// picks out this rank's block: the row-major index of its coordinates on
// those axes, in the order listed.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_PLACEMENT_H
#define MOE_RUNTIME_ENGINE_PLACEMENT_H

#include "moe/Runtime/Program.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace moe::rt::engine {

class Placement {
public:
  /// Rank `rank` of `program`'s (verified) mesh; rank 0 of a program
  /// without a mesh.
  Placement(const Program &program, int64_t rank);

  int64_t rank() const { return rank_; }
  /// One coordinate per mesh axis.
  const std::vector<int64_t> &coordinates() const { return coordinates_; }

  /// The row-major index of this rank's coordinates on `axes` (0 for none):
  /// its block along a dimension split over them.
  int64_t blockIndex(const AxisList &axes) const;

  /// The shape of the whole tensor a (split) buffer holds a block of.
  std::vector<int64_t> globalShape(const Buffer &buffer) const;

  /// Calls `visit(localOffset, globalIndex, length)` for every run of
  /// elements that is contiguous in both the local block and the whole
  /// tensor, in block order: elements [localOffset, localOffset + length)
  /// of the block are elements [globalIndex, globalIndex + length) of the
  /// whole tensor in row-major order. An unsplit buffer is one run.
  void
  forEachRun(const Buffer &buffer,
             const std::function<void(int64_t localOffset, int64_t globalIndex,
                                      int64_t length)> &visit) const;

private:
  const Program &program_;
  int64_t rank_;
  std::vector<int64_t> coordinates_;
};

} // namespace moe::rt::engine

#endif // MOE_RUNTIME_ENGINE_PLACEMENT_H
