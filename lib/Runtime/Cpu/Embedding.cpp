//===- Embedding.cpp - Token embedding lookup and its gradient ------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include <algorithm>

namespace moe::rt::cpu {

int64_t embeddingForward(const int32_t *tokens, const float *table, float *y,
                         int64_t T, int64_t V, int64_t H) {
  for (int64_t t = 0; t < T; ++t) {
    int64_t id = tokens[t];
    // Report the position instead of reading outside the table; the caller
    // turns it into an error naming the offending token.
    if (id < 0 || id >= V)
      return t;
    std::copy(table + id * H, table + (id + 1) * H, y + t * H);
  }
  return -1;
}

void embeddingBackward(const float *dy, const int32_t *tokens, float *dtable,
                       int64_t T, int64_t V, int64_t H) {
  std::fill(dtable, dtable + V * H, 0.0f);
  // Sequential in t: repeated tokens accumulate in token order, so the sums
  // are reproducible bit for bit.
  for (int64_t t = 0; t < T; ++t) {
    int64_t id = tokens[t];
    if (id < 0 || id >= V)
      continue;
    float *row = dtable + id * H;
    const float *g = dy + t * H;
    for (int64_t i = 0; i < H; ++i)
      row[i] += g[i];
  }
}

} // namespace moe::rt::cpu
