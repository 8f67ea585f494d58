//===- Elementwise.cpp - Residual add, the SwiGLU gate and casts ----------===//

#include "moe/Runtime/Cpu/Kernels.h"

#include "KernelUtils.h"
#include "ThreadPool.h"

#include "moe/Runtime/IO/Float16.h"

namespace moe::rt::cpu {

void castToBf16(const float *x, uint16_t *y, int64_t n) {
  detail::forEachShare(n, detail::kElementGrain,
                       [&](int64_t begin, int64_t end) {
                         for (int64_t i = begin; i < end; ++i)
                           y[i] = io::floatToBf16(x[i]);
                       });
}

void castFromBf16(const uint16_t *x, float *y, int64_t n) {
  detail::forEachShare(n, detail::kElementGrain,
                       [&](int64_t begin, int64_t end) {
                         for (int64_t i = begin; i < end; ++i)
                           y[i] = io::bf16ToFloat(x[i]);
                       });
}

void roundToBf16(float *x, int64_t n) {
  detail::forEachShare(n, detail::kElementGrain,
                       [&](int64_t begin, int64_t end) {
                         for (int64_t i = begin; i < end; ++i)
                           x[i] = io::bf16ToFloat(io::floatToBf16(x[i]));
                       });
}

void add(const float *a, const float *b, float *y, int64_t n) {
  // Element i reads a[i] and b[i] before writing y[i], so aliasing is safe.
  detail::forEachShare(n, detail::kElementGrain,
                       [&](int64_t begin, int64_t end) {
                         for (int64_t i = begin; i < end; ++i)
                           y[i] = a[i] + b[i];
                       });
}

} // namespace moe::rt::cpu
