//===- ConfigReader.h - the fields of one HF config.json -------*- C++ -*-===//
//
// Reads a config's fields for moe-import's architecture tables, remembering
// which were read (any other is refused by name) and keeping every problem,
// one line each, naming the config, the HF field and its value (cut for the
// message). Private to lib/Import.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_IMPORT_CONFIGREADER_H
#define MOE_LIB_IMPORT_CONFIGREADER_H

#include "moe/Dialect/MoE/IR/FormatNumber.h"
#include "moe/Import/ConfigJson.h"

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mlir::moe::import {

/// `value` as compact JSON, cut for a message.
inline std::string describe(const llvm::json::Value &value) {
  std::string text;
  llvm::raw_string_ostream(text) << value;
  return cutForMessage(text);
}

/// A double as `0.001` for messages.
inline std::string describe(double value) { return formatNumber(value); }

/// The integer a JSON number token wrote: 32, not 32.0 (HF's int fields
/// refuse a float), and nothing past int64.
inline std::optional<int64_t> integerToken(const llvm::json::Value &value) {
  if (std::optional<uint64_t> count = value.getAsUINT64())
    return *count <= uint64_t(std::numeric_limits<int64_t>::max())
               ? std::optional<int64_t>(static_cast<int64_t>(*count))
               : std::nullopt;
  // Negative integers (getAsUINT64 takes non-negative ones only); -1.0
  // reads as -1, which every check here refuses as -1 would be.
  std::optional<int64_t> negative = value.getAsInteger();
  if (negative && *negative < 0)
    return negative;
  return std::nullopt;
}

/// Reads the fields of one config, remembering which it read; every
/// problem is kept, the first one per field.
class ConfigReader {
public:
  /// Reads `config`, named `origin` in errors, for HF's class `hfClass`;
  /// `ignored` fields read as absent.
  ConfigReader(const llvm::json::Object &config, const std::string &origin,
               const std::set<std::string> &ignored, llvm::StringRef hfClass)
      : config(config), origin(origin), ignored(ignored), hfClass(hfClass) {}

  bool failed() const { return !problems.empty(); }
  /// One line per problem: "ORIGIN: field 'NAME': why".
  std::vector<std::string> problems;

  /// Fields whose explicit null means what their absence means.
  void allowNull(ArrayRef<StringLiteral> fields) {
    for (StringLiteral field : fields)
      nullable.insert(field);
  }

  /// The value of `field`, or null when absent (or --ignore'd); an explicit
  /// null is absent where HF reads it so, and an error elsewhere.
  const llvm::json::Value *get(StringRef field) {
    known.insert(field);
    if (ignored.count(field.str()))
      return nullptr;
    const llvm::json::Value *value = config.get(field);
    if (!value)
      return nullptr;
    if (value->kind() == llvm::json::Value::Null) {
      if (!nullable.contains(field))
        fail(field, llvm::formatv("null, which HF's {0} refuses or fails "
                                  "on (leave the field out for its default)",
                                  hfClass));
      return nullptr;
    }
    return value;
  }
  bool has(StringRef field) { return get(field) != nullptr; }

  void fail(StringRef field, const Twine &why) {
    if (!failedFields.insert(field).second)
      return;
    problems.push_back(
        (origin + ": field '" + cutForMessage(field) + "': " + why).str());
  }

  /// A problem with a command-line flag given with this config.
  void failFlag(StringRef flag, const Twine &why) {
    problems.push_back((origin + ": " + flag + ": " + why).str());
  }

  /// An integer field; `fallback` when absent (HF's default), else an
  /// error for a missing one.
  std::optional<int64_t> integer(StringRef field,
                                 std::optional<int64_t> fallback = {}) {
    const llvm::json::Value *value = get(field);
    if (!value) {
      if (!fallback)
        fail(field, "missing");
      return fallback;
    }
    std::optional<int64_t> number = integerToken(*value);
    if (!number)
      fail(field, "expected an integer, got " + describe(*value));
    return number;
  }
  std::optional<double> number(StringRef field, double fallback) {
    const llvm::json::Value *value = get(field);
    if (!value)
      return fallback;
    std::optional<double> number = value->getAsNumber();
    if (!number)
      fail(field, "expected a number, got " + describe(*value));
    return number;
  }
  bool boolean(StringRef field, bool fallback) {
    const llvm::json::Value *value = get(field);
    if (!value)
      return fallback;
    std::optional<bool> flag = value->getAsBoolean();
    if (!flag)
      fail(field, "expected true or false, got " + describe(*value));
    return flag.value_or(fallback);
  }

  /// An integer field in [min, max] (`max` is moec's limit, named
  /// `limit`); nullopt after an error.
  std::optional<int64_t> size(StringRef field, std::optional<int64_t> fallback,
                              int64_t min, int64_t max, StringRef limit) {
    std::optional<int64_t> value = integer(field, fallback);
    if (!value)
      return std::nullopt;
    if (*value < min) {
      fail(field,
           llvm::formatv("expected an integer >= {0}, got {1}", min, *value));
      return std::nullopt;
    }
    if (*value > max) {
      fail(field, llvm::formatv("{0} is more than moec's {1} {2}", *value, max,
                                limit));
      return std::nullopt;
    }
    return value;
  }

  /// Refuses an integer in a field HF's strict config class types float
  /// (transformers 5.25 refuses `"rms_norm_eps": 1`).
  void expectFloatToken(StringRef field) {
    const llvm::json::Value *value = get(field);
    if (value && value->getAsUINT64())
      fail(field, llvm::formatv("expected a float: HF's {0} refuses the "
                                "integer {1} here (write {1}.0)",
                                hfClass, describe(*value)));
  }

  /// A number field in [low, high] (or (low, high] when `openLow`); the
  /// bounds are moec's sanity limits (docs/import.md). `hfFloat`: HF types
  /// the field float and refuses an integer in it.
  std::optional<double> bounded(StringRef field, double fallback, double low,
                                double high, bool openLow,
                                bool hfFloat = false) {
    if (hfFloat)
      expectFloatToken(field);
    std::optional<double> value = number(field, fallback);
    if (!value)
      return std::nullopt;
    if (!std::isfinite(*value) || (openLow ? *value <= low : *value < low) ||
        *value > high) {
      fail(field, llvm::formatv("expected a number in {0}{1}, {2}], got {3}",
                                openLow ? "(" : "[", describe(low),
                                describe(high), describe(*value)));
      return std::nullopt;
    }
    // moec computes in f32: 1e-320 is positive, but 0 there.
    if (openLow && !(static_cast<float>(*value) > low)) {
      fail(field, llvm::formatv("{0} is {1} in f32, which moec computes in",
                                describe(*value),
                                describe(static_cast<float>(*value))));
      return std::nullopt;
    }
    return value;
  }

  /// A token id: absent, null, or an integer in [0, vocab); eos_token_id
  /// may be a list of them (HF's generation stops at any).
  void tokenId(StringRef field, std::optional<int64_t> vocab, bool list) {
    const llvm::json::Value *value = get(field);
    if (!value)
      return;
    auto check = [&](const llvm::json::Value &id, const Twine &where) {
      std::optional<int64_t> number = integerToken(id);
      if (!number)
        fail(field,
             where + "expected a token id (an integer), got " + describe(id));
      else if (*number < 0 || (vocab && *number >= *vocab))
        fail(field, where + llvm::formatv("token id {0} is outside [0, "
                                          "vocab_size = {1})",
                                          *number,
                                          vocab ? std::to_string(*vocab)
                                                : std::string("?"))
                                .str());
    };
    if (const llvm::json::Array *ids = value->getAsArray(); ids && list) {
      for (auto [i, id] : llvm::enumerate(*ids))
        check(id, "entry " + Twine(i) + ": ");
      return;
    }
    check(*value, "");
  }

  /// A field that must be absent (null) or hold what moec implements.
  void expectString(StringRef field, StringRef implemented) {
    const llvm::json::Value *value = get(field);
    if (!value)
      return;
    std::optional<StringRef> text = value->getAsString();
    if (!text || *text != implemented)
      fail(field, llvm::formatv("moec implements '{0}' only, got {1}",
                                implemented, describe(*value)));
  }
  void expectNumber(StringRef field, double implemented) {
    const llvm::json::Value *value = get(field);
    if (!value)
      return;
    std::optional<double> got = value->getAsNumber();
    if (!got || *got != implemented)
      fail(field, "moec implements " + describe(implemented) + " only, got " +
                      describe(*value));
  }
  void expectBool(StringRef field, bool implemented) {
    const llvm::json::Value *value = get(field);
    if (!value)
      return;
    std::optional<bool> got = value->getAsBoolean();
    if (!got || *got != implemented)
      fail(field,
           llvm::formatv("moec implements {0} only, got {1}",
                         implemented ? "true" : "false", describe(*value)));
  }
  void expectAbsent(StringRef field, StringRef why) {
    if (has(field))
      fail(field, why);
  }

  /// Refuses every field nobody read, listing the known ones once.
  void refuseUnknown() {
    bool first = true;
    for (const auto &[key, value] : config) {
      StringRef name = key;
      if (known.contains(name) || ignored.count(name.str()))
        continue;
      std::string knownList;
      if (first) {
        SmallVector<StringRef> names;
        for (const auto &entry : known)
          names.push_back(entry.getKey());
        llvm::sort(names);
        knownList = "; known fields: " + llvm::join(names, ", ");
        first = false;
      }
      std::string cut = cutForMessage(name);
      fail(name, "not implemented by moe-import" + knownList + " (--ignore " +
                     cut + " drops it, the model without it)");
    }
  }

private:
  const llvm::json::Object &config;
  const std::string &origin;
  const std::set<std::string> &ignored;
  StringRef hfClass;
  llvm::StringSet<> known, nullable, failedFields;
};

} // namespace mlir::moe::import

#endif // MOE_LIB_IMPORT_CONFIGREADER_H
