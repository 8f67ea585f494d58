//===- ExpertNames.h - stacked experts and their per-expert names -*- C++
//-*-===//
//
// A parameter or optimizer state named with "{e}" is a stack of experts
// along dimension 0. Checkpoints (HF's, and what moe-run --save writes)
// hold one tensor per expert, "{e}" replaced by its index in decimal
// without leading zeros. The artifact verifier, the weights' export and
// the HF loader all name and recognise those tensors here.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_EXPERTNAMES_H
#define MOE_RUNTIME_EXPERTNAMES_H

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <string>

namespace moe::rt {

inline constexpr absl::string_view kExpertPlaceholder = "{e}";

/// Whether `name` is a stack of experts.
inline bool isStackedName(absl::string_view name) {
  return name.find(kExpertPlaceholder) != absl::string_view::npos;
}

/// The name of expert `e`'s tensor of the stacked `name`.
inline std::string expertName(absl::string_view name, int64_t e) {
  std::string out(name);
  out.replace(name.find(kExpertPlaceholder), kExpertPlaceholder.size(),
              std::to_string(e));
  return out;
}

/// The expert whose name `name` is when "{e}" in `stacked` is replaced by
/// the index in decimal, or -1. Matching instead of expanding keeps the
/// check cheap however many experts a (possibly malformed) shape claims.
inline int64_t expertIndexOf(absl::string_view name,
                             absl::string_view stacked) {
  size_t at = stacked.find(kExpertPlaceholder);
  absl::string_view prefix = stacked.substr(0, at);
  absl::string_view suffix = stacked.substr(at + kExpertPlaceholder.size());
  if (name.size() <= prefix.size() + suffix.size() ||
      !absl::StartsWith(name, prefix) || !absl::EndsWith(name, suffix))
    return -1;
  absl::string_view digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  // expertName writes indices without leading zeros; 18 digits fit in
  // int64.
  if (digits.size() > 18 || (digits.size() > 1 && digits[0] == '0'))
    return -1;
  int64_t value = 0;
  for (char c : digits) {
    if (!absl::ascii_isdigit(c))
      return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

} // namespace moe::rt

#endif // MOE_RUNTIME_EXPERTNAMES_H
