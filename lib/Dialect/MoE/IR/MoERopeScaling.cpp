//===- MoERopeScaling.cpp - #moe.rope_scaling -----------------------------===//
//
// Parsing, printing and verifying scaled RoPE's parameters. Each kind
// prints, and must be given, exactly the parameters its formula reads.
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"
#include "moe/Dialect/MoE/IR/FormatNumber.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The parameters of #moe.rope_scaling, by name, in printing order.
enum class Parameter {
  Factor,
  OriginalMax,
  BetaFast,
  BetaSlow,
  Truncate,
  LowFreqFactor,
  HighFreqFactor,
  AttentionFactor
};
constexpr StringLiteral kParameterNames[] = {
    "factor",          "original_max_position_embeddings",
    "beta_fast",       "beta_slow",
    "truncate",        "low_freq_factor",
    "high_freq_factor", "attention_factor"};

StringRef nameOf(Parameter p) { return kParameterNames[static_cast<int>(p)]; }

/// The parameters a kind's formula reads.
SmallVector<Parameter> parametersOf(RopeScalingKind kind) {
  switch (kind) {
  case RopeScalingKind::linear:
    return {Parameter::Factor};
  case RopeScalingKind::yarn:
    return {Parameter::Factor,   Parameter::OriginalMax,
            Parameter::BetaFast, Parameter::BetaSlow,
            Parameter::Truncate, Parameter::AttentionFactor};
  case RopeScalingKind::llama3:
    return {Parameter::Factor, Parameter::OriginalMax,
            Parameter::LowFreqFactor, Parameter::HighFreqFactor};
  }
  return {};
}

/// The values being parsed; a kind's unread parameters keep the neutral
/// values the verifier expects.
struct Values {
  double factor = 1.0;
  int64_t originalMax = 0;
  double betaFast = 0.0, betaSlow = 0.0;
  bool truncate = true;
  double lowFreqFactor = 0.0, highFreqFactor = 0.0;
  double attentionFactor = 1.0;
};


} // namespace

Attribute RopeScalingAttr::parse(AsmParser &parser, Type) {
  std::string kindName;
  SMLoc kindLoc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeywordOrString(&kindName))
    return {};
  std::optional<RopeScalingKind> kind = symbolizeRopeScalingKind(kindName);
  if (!kind) {
    parser.emitError(kindLoc) << "unknown rope scaling '" << kindName
                              << "'; known: linear, yarn, llama3";
    return {};
  }
  SmallVector<Parameter> expected = parametersOf(*kind);
  SmallVector<Parameter> given;
  Values v;
  while (succeeded(parser.parseOptionalComma())) {
    std::string key;
    SMLoc keyLoc = parser.getCurrentLocation();
    if (parser.parseKeywordOrString(&key) || parser.parseEqual())
      return {};
    const StringLiteral *known = llvm::find(kParameterNames, key);
    auto parameter = static_cast<Parameter>(known - std::begin(kParameterNames));
    if (known == std::end(kParameterNames) ||
        !llvm::is_contained(expected, parameter)) {
      SmallVector<StringRef> names = llvm::map_to_vector(expected, nameOf);
      parser.emitError(keyLoc)
          << "'" << key << "' is not a parameter of " << kindName
          << " scaling; its parameters: " << llvm::join(names, ", ");
      return {};
    }
    if (llvm::is_contained(given, parameter)) {
      parser.emitError(keyLoc) << "'" << key << "' is given twice";
      return {};
    }
    given.push_back(parameter);
    ParseResult parsed = success();
    switch (parameter) {
    case Parameter::Factor:
      parsed = parser.parseFloat(v.factor);
      break;
    case Parameter::OriginalMax:
      parsed = parser.parseInteger(v.originalMax);
      break;
    case Parameter::BetaFast:
      parsed = parser.parseFloat(v.betaFast);
      break;
    case Parameter::BetaSlow:
      parsed = parser.parseFloat(v.betaSlow);
      break;
    case Parameter::Truncate: {
      std::string flag;
      SMLoc flagLoc = parser.getCurrentLocation();
      parsed = parser.parseKeywordOrString(&flag);
      if (succeeded(parsed) && flag != "true" && flag != "false") {
        parser.emitError(flagLoc) << "expected true or false";
        return {};
      }
      v.truncate = flag == "true";
      break;
    }
    case Parameter::LowFreqFactor:
      parsed = parser.parseFloat(v.lowFreqFactor);
      break;
    case Parameter::HighFreqFactor:
      parsed = parser.parseFloat(v.highFreqFactor);
      break;
    case Parameter::AttentionFactor:
      parsed = parser.parseFloat(v.attentionFactor);
      break;
    }
    if (failed(parsed))
      return {};
  }
  for (Parameter parameter : expected)
    if (!llvm::is_contained(given, parameter)) {
      parser.emitError(parser.getCurrentLocation())
          << kindName << " scaling needs '" << nameOf(parameter) << "'";
      return {};
    }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<RopeScalingAttr>(
      parser.getContext(), *kind, APFloat(v.factor), v.originalMax,
      APFloat(v.betaFast), APFloat(v.betaSlow), v.truncate,
      APFloat(v.lowFreqFactor), APFloat(v.highFreqFactor),
      APFloat(v.attentionFactor));
}

void RopeScalingAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyRopeScalingKind(getKind());
  for (Parameter parameter : parametersOf(getKind())) {
    printer << ", " << nameOf(parameter) << " = ";
    switch (parameter) {
    case Parameter::Factor:
      printer.printFloat(getFactor());
      break;
    case Parameter::OriginalMax:
      printer << getOriginalMaxPositionEmbeddings();
      break;
    case Parameter::BetaFast:
      printer.printFloat(getBetaFast());
      break;
    case Parameter::BetaSlow:
      printer.printFloat(getBetaSlow());
      break;
    case Parameter::Truncate:
      printer << (getTruncate() ? "true" : "false");
      break;
    case Parameter::LowFreqFactor:
      printer.printFloat(getLowFreqFactor());
      break;
    case Parameter::HighFreqFactor:
      printer.printFloat(getHighFreqFactor());
      break;
    case Parameter::AttentionFactor:
      printer.printFloat(getAttentionFactor());
      break;
    }
  }
  printer << ">";
}

LogicalResult
RopeScalingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        RopeScalingKind kind, APFloat factorValue,
                        int64_t originalMax, APFloat betaFastValue,
                        APFloat betaSlowValue, bool truncate,
                        APFloat lowFreqFactorValue,
                        APFloat highFreqFactorValue,
                        APFloat attentionFactorValue) {
  double factor = factorValue.convertToDouble();
  double betaFast = betaFastValue.convertToDouble();
  double betaSlow = betaSlowValue.convertToDouble();
  double lowFreqFactor = lowFreqFactorValue.convertToDouble();
  double highFreqFactor = highFreqFactorValue.convertToDouble();
  double attentionFactor = attentionFactorValue.convertToDouble();
  for (double value : {factor, betaFast, betaSlow, lowFreqFactor,
                       highFreqFactor, attentionFactor})
    if (!std::isfinite(value))
      return emitError() << "expected finite rope scaling parameters";
  if (factor < 1)
    return emitError() << "expected factor >= 1, got " << formatNumber(factor);
  if (!(attentionFactor > 0))
    return emitError() << "expected attention_factor > 0, got "
                       << formatNumber(attentionFactor);
  if (kind == RopeScalingKind::linear)
    return success();
  if (originalMax < 1)
    return emitError() << "expected original_max_position_embeddings >= 1, "
                          "got "
                       << originalMax;
  if (kind == RopeScalingKind::yarn) {
    if (!(betaSlow > 0) || betaFast < betaSlow)
      return emitError() << "expected 0 < beta_slow <= beta_fast, got "
                            "beta_slow = "
                         << formatNumber(betaSlow) << " and beta_fast = "
                         << formatNumber(betaFast);
    return success();
  }
  if (!(lowFreqFactor > 0) || highFreqFactor <= lowFreqFactor)
    return emitError() << "expected 0 < low_freq_factor < high_freq_factor, "
                          "got "
                       << formatNumber(lowFreqFactor) << " and " << formatNumber(highFreqFactor);
  return success();
}
