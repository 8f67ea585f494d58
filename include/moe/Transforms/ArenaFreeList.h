//===- ArenaFreeList.h - free byte ranges of one arena ----------*- C++ -*-===//
//
// The free ranges of an arena below its frontier, coalesced, indexed by
// offset and by size: best-fit lookup, taking and releasing a range are
// O(log n) in the number of free ranges. Everything from the frontier up is
// free too; a released range that reaches the frontier lowers it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TRANSFORMS_ARENAFREELIST_H
#define MOE_TRANSFORMS_ARENAFREELIST_H

#include <cstdint>
#include <map>
#include <set>
#include <utility>

namespace mlir::moe {

class ArenaFreeList {
public:
  /// The lowest offset of the smallest free range of at least `bytes`, or
  /// the frontier when no range below it is large enough.
  uint64_t bestFit(uint64_t bytes);

  /// The lowest offset >= `from` where `bytes` bytes are free. Walks the
  /// free ranges from `from` up: O(n) in the worst case, for the few values
  /// several pipeline ranks hold (which need an offset free on each).
  uint64_t firstFitFrom(uint64_t from, uint64_t bytes);

  /// Marks [offset, offset + bytes) used; it must be free. Above the
  /// frontier, the gap below the range becomes a free range.
  void take(uint64_t offset, uint64_t bytes);

  /// Marks [offset, offset + bytes), which was taken, free again.
  void release(uint64_t offset, uint64_t bytes);

  /// Free ranges visited so far: the work done, which tests bound.
  uint64_t visits() const { return visited; }

private:
  void insertRange(uint64_t offset, uint64_t bytes);
  void eraseRange(std::map<uint64_t, uint64_t>::iterator range);

  std::map<uint64_t, uint64_t> byOffset;          // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> bySize; // (size, offset)
  uint64_t frontier = 0;
  uint64_t visited = 0;
};

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_ARENAFREELIST_H
