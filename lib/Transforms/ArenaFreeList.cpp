//===- ArenaFreeList.cpp - free byte ranges of one arena ------------------===//
#include "moe/Transforms/ArenaFreeList.h"

#include <cassert>
#include <iterator>

using namespace mlir::moe;

uint64_t ArenaFreeList::bestFit(uint64_t bytes) {
  ++visited;
  auto fit = bySize.lower_bound({bytes, 0});
  return fit == bySize.end() ? frontier : fit->second;
}

uint64_t ArenaFreeList::firstFitFrom(uint64_t from, uint64_t bytes) {
  if (from >= frontier)
    return from;
  // The range holding `from`, if any, then every range above it.
  auto range = byOffset.upper_bound(from);
  if (range != byOffset.begin()) {
    auto below = std::prev(range);
    ++visited;
    if (below->first + below->second >= from + bytes)
      return from;
  }
  for (; range != byOffset.end(); ++range) {
    ++visited;
    if (range->second >= bytes)
      return range->first;
  }
  return frontier;
}

void ArenaFreeList::insertRange(uint64_t offset, uint64_t bytes) {
  byOffset.emplace(offset, bytes);
  bySize.emplace(bytes, offset);
}

void ArenaFreeList::eraseRange(std::map<uint64_t, uint64_t>::iterator range) {
  bySize.erase({range->second, range->first});
  byOffset.erase(range);
}

void ArenaFreeList::take(uint64_t offset, uint64_t bytes) {
  ++visited;
  if (bytes == 0)
    return;
  if (offset >= frontier) {
    if (offset > frontier)
      insertRange(frontier, offset - frontier);
    frontier = offset + bytes;
    return;
  }
  // Ranges below the frontier never reach it, so the range holding
  // `offset` holds all of [offset, offset + bytes).
  auto range = std::prev(byOffset.upper_bound(offset));
  uint64_t begin = range->first, end = range->first + range->second;
  assert(begin <= offset && offset + bytes <= end && "taking used bytes");
  eraseRange(range);
  if (begin < offset)
    insertRange(begin, offset - begin);
  if (offset + bytes < end)
    insertRange(offset + bytes, end - (offset + bytes));
}

void ArenaFreeList::release(uint64_t offset, uint64_t bytes) {
  ++visited;
  if (bytes == 0)
    return;
  uint64_t begin = offset, end = offset + bytes;
  auto above = byOffset.lower_bound(end);
  if (above != byOffset.end() && above->first == end) {
    end += above->second;
    eraseRange(above);
  }
  auto next = byOffset.lower_bound(begin);
  if (next != byOffset.begin()) {
    auto below = std::prev(next);
    if (below->first + below->second == begin) {
      begin = below->first;
      eraseRange(below);
    }
  }
  if (end >= frontier)
    frontier = begin;
  else
    insertRange(begin, end - begin);
}
