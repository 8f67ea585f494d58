//===- RowSums.cpp - the BF16 sums of the collectives ---------------------===//
#include "RowSums.h"

#include "moe/Runtime/IO/Float16.h"

namespace moe::rt::comm::detail {

void sumRows(Bf16 *out, const Bf16 *rows, int n, size_t count) {
  // The same conversions as the CPU kernels' casts (cpu::castToBf16), so a
  // sum here equals an fp32 sum of decoded images rounded by a Cast.
  for (size_t e = 0; e < count; ++e) {
    float total = io::bf16ToFloat(rows[e].bits);
    for (int i = 1; i < n; ++i)
      total += io::bf16ToFloat(rows[static_cast<size_t>(i) * count + e].bits);
    out[e].bits = io::floatToBf16(total);
  }
}

} // namespace moe::rt::comm::detail
