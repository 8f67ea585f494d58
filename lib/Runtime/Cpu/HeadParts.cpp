//===- HeadParts.cpp - Per-head concatenation and its inverse -------------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "ThreadPool.h"

#include <algorithm>

namespace moe::rt::cpu {

void concatHeads(const float *a, const float *b, float *y, int64_t rows,
                 int64_t heads, int64_t aWidth, int64_t bWidth, bool sharedB) {
  int64_t width = aWidth + bWidth;
  detail::forEachShare(
      rows, detail::rowGrain(heads * width), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
          for (int64_t h = 0; h < heads; ++h) {
            float *out = y + (r * heads + h) * width;
            std::copy_n(a + (r * heads + h) * aWidth, aWidth, out);
            const float *part =
                sharedB ? b + r * bWidth : b + (r * heads + h) * bWidth;
            std::copy_n(part, bWidth, out + aWidth);
          }
      });
}

void splitHeads(const float *y, float *a, float *b, int64_t rows, int64_t heads,
                int64_t aWidth, int64_t bWidth, bool sharedB) {
  int64_t width = aWidth + bWidth;
  detail::forEachShare(
      rows, detail::rowGrain(heads * width), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          if (sharedB)
            std::fill_n(b + r * bWidth, bWidth, 0.0f);
          for (int64_t h = 0; h < heads; ++h) {
            const float *in = y + (r * heads + h) * width;
            std::copy_n(in, aWidth, a + (r * heads + h) * aWidth);
            if (!sharedB) {
              std::copy_n(in + aWidth, bWidth, b + (r * heads + h) * bWidth);
              continue;
            }
            float *sum = b + r * bWidth;
            for (int64_t e = 0; e < bWidth; ++e)
              sum[e] += in[aWidth + e];
          }
        }
      });
}

} // namespace moe::rt::cpu
