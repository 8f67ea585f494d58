//===- GroupSums.cpp - exact double and count sums over a group -----------===//

#include "moe/Runtime/Comm/GroupSums.h"

#include <cstring>
#include <vector>

namespace moe::rt::comm {

absl::Status sumOverGroup(Group &group, absl::Span<double> sums,
                          absl::Span<int64_t> counts) {
  int size = group.size();
  if (size == 1)
    return absl::OkStatus();
  // Each 8-byte value is two int32 words; int32 is what allGather copies.
  static_assert(sizeof(double) == 2 * sizeof(int32_t) &&
                sizeof(int64_t) == 2 * sizeof(int32_t));
  size_t values = sums.size() + counts.size();
  std::vector<int32_t> mine(2 * values);
  // An empty span may hold a null pointer, which memcpy must not be given
  // even for zero bytes.
  if (!sums.empty())
    std::memcpy(mine.data(), sums.data(), sums.size() * sizeof(double));
  if (!counts.empty())
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

absl::Status sumEachOverItsGroup(absl::Span<double> values,
                                 absl::Span<const int64_t> groupIds,
                                 const std::function<Group &(int64_t)> &groupOf) {
  size_t n = values.size();
  std::vector<bool> done(n, groupIds.empty());
  for (size_t i = 0; i < n; ++i) {
    if (done[i] || groupIds[i] < 0)
      continue;
    std::vector<size_t> members;
    std::vector<double> sums;
    for (size_t j = i; j < n; ++j)
      if (groupIds[j] == groupIds[i]) {
        members.push_back(j);
        sums.push_back(values[j]);
        done[j] = true;
      }
    if (absl::Status status =
            sumOverGroup(groupOf(groupIds[i]), absl::MakeSpan(sums), {});
        !status.ok())
      return status;
    for (size_t k = 0; k < members.size(); ++k)
      values[members[k]] = sums[k];
  }
  return absl::OkStatus();
}

} // namespace moe::rt::comm
