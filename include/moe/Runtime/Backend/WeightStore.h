//===- WeightStore.h - one rank's weights as the host sees them -*- C++ -*-===//
//
// What weights files, checkpoints and initialisation read and write: the
// host copy of one rank's parameters and optimizer state (its blocks of the
// split ones). The CPU executor's storage is that copy; a device backend
// keeps a host staging copy (engine::HostWeights) that it moves to and
// from the device (Backend::pushWeights, Backend::pullWeights).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_BACKEND_WEIGHTSTORE_H
#define MOE_RUNTIME_BACKEND_WEIGHTSTORE_H

#include "moe/Runtime/Program.h"

#include <cstdint>
#include <vector>

namespace moe::rt {

namespace engine {
class Placement;
} // namespace engine

class WeightStore {
public:
  virtual ~WeightStore() = default;

  virtual const Program &program() const = 0;
  /// This rank in the program's mesh (0 without one).
  virtual int64_t rank() const = 0;
  /// This rank's place in the mesh (which block of each split buffer).
  virtual const engine::Placement &placementOf() const = 0;
  /// Parameter and optimizer-state buffer indices this rank holds, in
  /// program order.
  virtual const std::vector<uint32_t> &parameters() const = 0;
  virtual const std::vector<uint32_t> &optimizerStates() const = 0;
  /// The host storage of an f32 buffer among them; nullptr for others.
  virtual float *data(uint32_t buffer) = 0;
  virtual const float *data(uint32_t buffer) const = 0;
  /// The shape of the whole tensor a buffer holds (a block of, when split).
  virtual std::vector<int64_t> globalShape(uint32_t buffer) const = 0;
};

} // namespace moe::rt

#endif // MOE_RUNTIME_BACKEND_WEIGHTSTORE_H
