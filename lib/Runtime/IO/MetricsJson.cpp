//===- MetricsJson.cpp - one training step as a JSON object ---------------===//
#include "moe/Runtime/IO/Metrics.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include <cmath>
#include <set>

namespace moe::rt::io {

namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson number(double value) {
  if (!std::isfinite(value))
    return nullptr;
  return value;
}

} // namespace

absl::StatusOr<std::string> formatMetricsJson(const MetricsRecord &record) {
  OrderedJson line = OrderedJson::object();
  line["step"] = record.step;
  const std::pair<const char *, const std::optional<double> *> fields[] = {
      {"loss", &record.loss},
      {"grad_norm", &record.gradNorm},
      {"lr", &record.lr},
      {"tokens_per_s", &record.tokensPerS},
      {"flops_per_s", &record.flopsPerS},
      {"elapsed_s", &record.elapsedS}};
  std::set<std::string> used = {"step"};
  for (const auto &[key, value] : fields) {
    used.insert(key);
    if (value->has_value())
      line[key] = number(**value);
  }
  std::vector<std::pair<std::string, double>> fieldsAfter = record.extra;
  fieldsAfter.insert(fieldsAfter.end(), record.detail.begin(),
                     record.detail.end());
  for (const auto &[key, value] : fieldsAfter) {
    if (key.empty())
      return absl::InvalidArgumentError("metrics field name is empty");
    if (!used.insert(key).second)
      return absl::InvalidArgumentError(
          absl::StrCat("metrics field '", key, "' is given twice"));
    line[key] = number(value);
  }
  try {
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::exception &) {
    return absl::InvalidArgumentError(
        "a metrics field name is not valid utf-8");
  }
}

} // namespace moe::rt::io
