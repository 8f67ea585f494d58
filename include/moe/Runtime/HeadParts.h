//===- HeadParts.h - the parts of a per-head concatenation ------*- C++ -*-===//
//
// ConcatHeads and SplitHeads (OpTable.td): a whole of `heads` heads, each
// its part of a then its part of b, where b is one part per head or one
// part every head shares. moe.concat_heads and moe.split_heads and the
// artifact verifier refuse widths that are neither; the compiler and the
// kernels read the layout here.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_HEADPARTS_H
#define MOE_RUNTIME_HEADPARTS_H

#include <cstdint>
#include <optional>

namespace moe::rt {

/// Each head's widths of a and b, and whether b is one part every head
/// shares.
struct HeadParts {
  int64_t aWidth = 0, bWidth = 0;
  bool sharedB = false;
};

/// The parts of a whole `wholeWidth` wide from an a `aWidth` and a b
/// `bWidth` wide (last dimensions), or none when they make no such whole.
/// Per head when b divides into the heads and the two fill the whole;
/// else shared when a plus `heads` copies of b fill it.
inline std::optional<HeadParts>
headPartsOf(int64_t heads, int64_t aWidth, int64_t bWidth, int64_t wholeWidth) {
  if (heads < 1 || aWidth % heads != 0)
    return std::nullopt;
  if (bWidth % heads == 0 && wholeWidth == aWidth + bWidth)
    return HeadParts{aWidth / heads, bWidth / heads, false};
  if (wholeWidth == aWidth + heads * bWidth)
    return HeadParts{aWidth / heads, bWidth, true};
  return std::nullopt;
}

} // namespace moe::rt

#endif // MOE_RUNTIME_HEADPARTS_H
