//===- Mutations.cpp - seeded damage to an artifact's bytes ---------------===//
#include "Mutations.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace moe::fuzz {
namespace {

size_t below(std::mt19937_64 &rng, size_t n) { return n == 0 ? 0 : rng() % n; }

Mutant byteMutation(const std::vector<uint8_t> &original, size_t limit,
                    std::mt19937_64 &rng) {
  Mutant mutant{original, "byte:"};
  int count = 1 + static_cast<int>(below(rng, 4));
  for (int i = 0; i < count; ++i) {
    size_t at = below(rng, limit);
    bool flip = rng() % 2 == 0;
    uint8_t value = static_cast<uint8_t>(rng());
    if (flip)
      mutant.bytes[at] ^= static_cast<uint8_t>(1u << (value % 8));
    else
      mutant.bytes[at] = value;
    absl::StrAppend(&mutant.description, flip ? " flip bit at " : " set ", at,
                    flip ? "" : absl::StrCat(" to ", value));
  }
  return mutant;
}

Mutant offsetMutation(const std::vector<uint8_t> &original, size_t limit,
                      std::mt19937_64 &rng) {
  Mutant mutant{original, "offset: "};
  size_t at = below(rng, limit);
  switch (below(rng, 4)) {
  case 0:
    mutant.bytes.resize(at);
    absl::StrAppend(&mutant.description, "cut at ", at);
    break;
  case 1: {
    size_t count = 1 + below(rng, 16);
    std::vector<uint8_t> inserted(count);
    for (uint8_t &b : inserted)
      b = static_cast<uint8_t>(rng());
    mutant.bytes.insert(mutant.bytes.begin() + at, inserted.begin(),
                        inserted.end());
    absl::StrAppend(&mutant.description, "insert ", count, " bytes at ", at);
    break;
  }
  case 2: {
    size_t count = std::min(1 + below(rng, 16), limit - at);
    mutant.bytes.erase(mutant.bytes.begin() + at,
                       mutant.bytes.begin() + at + count);
    absl::StrAppend(&mutant.description, "delete ", count, " bytes at ", at);
    break;
  }
  default: {
    at = at / 4 * 4;
    if (at + 4 > limit)
      at = limit >= 4 ? limit - 4 : 0;
    uint32_t word;
    std::memcpy(&word, mutant.bytes.data() + at, 4);
    int32_t delta = static_cast<int32_t>(below(rng, 129)) - 64;
    if (delta == 0)
      delta = 4;
    word += static_cast<uint32_t>(delta);
    std::memcpy(mutant.bytes.data() + at, &word, 4);
    absl::StrAppend(&mutant.description, "word at ", at, " moved by ", delta);
    break;
  }
  }
  return mutant;
}

Mutant scalarMutation(const std::vector<uint8_t> &original, size_t limit,
                      std::mt19937_64 &rng) {
  Mutant mutant{original, "scalar: "};
  bool wide = rng() % 2 == 0 && limit >= 8;
  size_t width = wide ? 8 : 4;
  size_t at = below(rng, limit - width + 1) / width * width;
  uint8_t value[8];
  std::string shown;
  if (wide) {
    const int64_t values[] = {0, 1, -1, std::numeric_limits<int64_t>::max(),
                              std::numeric_limits<int64_t>::min(),
                              int64_t(1) << 32};
    int64_t v = values[below(rng, std::size(values))];
    std::memcpy(value, &v, 8);
    shown = absl::StrCat(v);
  } else if (rng() % 2 == 0) {
    const int32_t values[] = {0, 1, -1, std::numeric_limits<int32_t>::max(),
                              std::numeric_limits<int32_t>::min(), 65535};
    int32_t v = values[below(rng, std::size(values))];
    std::memcpy(value, &v, 4);
    shown = absl::StrCat(v);
  } else {
    const float values[] = {0.0f, -0.0f, 1e30f, -1e30f, std::nanf(""),
                            std::numeric_limits<float>::infinity(), 1e-30f};
    float v = values[below(rng, std::size(values))];
    std::memcpy(value, &v, 4);
    shown = absl::StrCat(v);
  }
  std::memcpy(mutant.bytes.data() + at, value, width);
  absl::StrAppend(&mutant.description, width * 8, "-bit word at ", at,
                  " set to ", shown);
  return mutant;
}

} // namespace

const char *mutationKindName(MutationKind kind) {
  switch (kind) {
  case MutationKind::Byte:
    return "byte";
  case MutationKind::Offset:
    return "offset";
  case MutationKind::Scalar:
    return "scalar";
  }
  return "?";
}

Mutant mutate(const std::vector<uint8_t> &original, size_t limit,
              MutationKind kind, std::mt19937_64 &rng) {
  switch (kind) {
  case MutationKind::Byte:
    return byteMutation(original, limit, rng);
  case MutationKind::Offset:
    return offsetMutation(original, limit, rng);
  case MutationKind::Scalar:
    return scalarMutation(original, limit, rng);
  }
  return {original, "none"};
}

} // namespace moe::fuzz
