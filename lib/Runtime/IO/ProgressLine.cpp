//===- ProgressLine.cpp - a training step as one human-readable line ------===//
#include "moe/Runtime/IO/Metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <cmath>

namespace moe::rt::io {

namespace {

/// Splits `value` into a mantissa with three significant digits and an SI
/// prefix ("", "k", "M", "G", "T", "P").
std::pair<std::string, std::string> siParts(double value) {
  if (std::isnan(value))
    return {"nan", ""};
  if (std::isinf(value))
    return {value < 0 ? "-inf" : "inf", ""};
  static const char *const prefixes[] = {"", "k", "M", "G", "T", "P"};
  double magnitude = std::fabs(value);
  int prefix = 0;
  while (prefix < 5 && magnitude >= 1000.0) {
    magnitude /= 1000.0;
    ++prefix;
  }
  // 999.7 would print as "1000": move it to the next prefix.
  if (magnitude >= 999.5 && prefix < 5) {
    magnitude /= 1000.0;
    ++prefix;
  }
  int decimals = magnitude >= 99.95 ? 0 : magnitude >= 9.995 ? 1 : 2;
  return {absl::StrFormat("%s%.*f", value < 0 ? "-" : "", decimals, magnitude),
          prefixes[prefix]};
}

} // namespace

std::string formatSiValue(double value) {
  auto [mantissa, prefix] = siParts(value);
  return mantissa + prefix;
}

std::string formatProgressLine(const MetricsRecord &record,
                               int64_t totalSteps) {
  std::vector<std::string> parts;
  parts.push_back(totalSteps > 0
                      ? absl::StrCat("step ", record.step, "/", totalSteps)
                      : absl::StrCat("step ", record.step));
  if (record.loss)
    parts.push_back(absl::StrFormat("loss %.4f", *record.loss));
  if (record.gradNorm)
    parts.push_back(absl::StrFormat("grad_norm %.3f", *record.gradNorm));
  if (record.lr)
    parts.push_back(absl::StrFormat("lr %.2e", *record.lr));
  if (record.tokensPerS)
    parts.push_back(formatSiValue(*record.tokensPerS) + " tok/s");
  if (record.flopsPerS) {
    auto [mantissa, prefix] = siParts(*record.flopsPerS);
    parts.push_back(absl::StrCat(mantissa, " ", prefix, "FLOP/s"));
  }
  if (record.elapsedS)
    parts.push_back(absl::StrFormat("%.1f s", *record.elapsedS));
  for (const auto &[key, value] : record.extra)
    parts.push_back(absl::StrFormat("%s %.4g", key, value));
  return absl::StrJoin(parts, " | ");
}

} // namespace moe::rt::io
