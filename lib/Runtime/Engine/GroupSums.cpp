//===- GroupSums.cpp - exact double and count sums over a group -----------===//

#include "GroupSums.h"

#include <cstring>
#include <vector>

namespace moe::rt::engine {

absl::Status sumOverGroup(comm::Group &group, absl::Span<double> sums,
                          absl::Span<int64_t> counts) {
  int size = group.size();
  if (size == 1)
    return absl::OkStatus();
  // Each 8-byte value is two int32 words; int32 is what allGather copies.
  static_assert(sizeof(double) == 2 * sizeof(int32_t) &&
                sizeof(int64_t) == 2 * sizeof(int32_t));
  size_t values = sums.size() + counts.size();
  std::vector<int32_t> mine(2 * values);
  std::memcpy(mine.data(), sums.data(), sums.size() * sizeof(double));
  std::memcpy(mine.data() + 2 * sums.size(), counts.data(),
              counts.size() * sizeof(int64_t));
  std::vector<int32_t> all(mine.size() * size);
  if (absl::Status status = group.allGather(mine, absl::MakeSpan(all));
      !status.ok())
    return status;

  for (size_t i = 0; i < sums.size(); ++i) {
    double total = 0.0;
    for (int r = 0; r < size; ++r) {
      double value;
      std::memcpy(&value, all.data() + r * mine.size() + 2 * i, sizeof(double));
      total = r == 0 ? value : total + value;
    }
    sums[i] = total;
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    int64_t total = 0;
    for (int r = 0; r < size; ++r) {
      int64_t value;
      std::memcpy(&value, all.data() + r * mine.size() + 2 * (sums.size() + i),
                  sizeof(int64_t));
      total += value;
    }
    counts[i] = total;
  }
  return absl::OkStatus();
}

} // namespace moe::rt::engine
