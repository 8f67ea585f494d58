//===- Placement.cpp - this rank's place in a program's mesh --------------===//

#include "moe/Runtime/Engine/Placement.h"

namespace moe::rt::engine {

Placement::Placement(const Program &program, int64_t rank)
    : program_(program), rank_(rank),
      coordinates_(program.meshShape.size(), 0) {
  int64_t rest = rank;
  for (size_t i = program.meshShape.size(); i-- > 0;) {
    coordinates_[i] = rest % program.meshShape[i];
    rest /= program.meshShape[i];
  }
}

int64_t Placement::blockIndex(const AxisList &axes) const {
  int64_t index = 0;
  for (const std::string &axis : axes)
    for (size_t i = 0; i < program_.meshAxes.size(); ++i)
      if (program_.meshAxes[i] == axis)
        index = index * program_.meshShape[i] + coordinates_[i];
  return index;
}

std::vector<int64_t> Placement::globalShape(const Buffer &buffer) const {
  std::vector<int64_t> shape = buffer.shape;
  for (size_t d = 0; d < buffer.split.size() && d < shape.size(); ++d)
    shape[d] *= program_.partsOf(buffer.split[d]);
  return shape;
}

void Placement::forEachRun(
    const Buffer &buffer,
    const std::function<void(int64_t, int64_t, int64_t)> &visit) const {
  const std::vector<int64_t> &local = buffer.shape;
  // Dimensions after the last split one are whole, so a block is
  // contiguous in the whole tensor from that dimension on: runs are the
  // block's slices along it (one run for a split of dimension 0 only).
  int64_t lastSplit = -1;
  for (size_t d = 0; d < buffer.split.size(); ++d)
    if (!buffer.split[d].empty())
      lastSplit = static_cast<int64_t>(d);
  if (lastSplit < 0) {
    visit(0, 0, buffer.numElements());
    return;
  }
  if (buffer.numElements() == 0)
    return;
  std::vector<int64_t> global = globalShape(buffer);
  size_t rank = local.size(), split = static_cast<size_t>(lastSplit);
  int64_t length = 1;
  for (size_t d = split; d < rank; ++d)
    length *= local[d];
  // Where the block starts along each dimension.
  std::vector<int64_t> origin(rank, 0);
  for (size_t d = 0; d <= split; ++d)
    origin[d] = blockIndex(buffer.split[d]) * local[d];
  int64_t runs = buffer.numElements() / length;
  std::vector<int64_t> index(split, 0); // the run's place before `split`
  for (int64_t run = 0; run < runs; ++run) {
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d)
      flat = flat * global[d] + origin[d] + (d < split ? index[d] : 0);
    visit(run * length, flat, length);
    // Next run: the last of the dimensions before `split` fastest.
    for (size_t d = split; d-- > 0;) {
      if (++index[d] < local[d])
        break;
      index[d] = 0;
    }
  }
}

} // namespace moe::rt::engine
