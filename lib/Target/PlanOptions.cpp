//===- PlanOptions.cpp - --plan-fix and --plan-software -------------------===//
#include "moe/Target/Planner.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace mlir::moe;
namespace pp = ::moe::pipeline;

namespace {
/// Walks a "key=value,key=value" list. `apply` returns none for an unknown
/// key, false for a bad value (naming in `expected` the values a key of
/// named choices takes); the first of either is the error.
LogicalResult forEachEntry(
    llvm::StringRef text, llvm::StringRef knownKeys, std::string &error,
    llvm::function_ref<std::optional<bool>(
        llvm::StringRef key, llvm::StringRef value, std::string &expected)>
        apply) {
  llvm::SmallVector<llvm::StringRef> entries;
  text.split(entries, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef entry : entries) {
    auto [key, value] = entry.trim().split('=');
    std::string expected;
    std::optional<bool> ok = apply(key.trim(), value.trim(), expected);
    if (!ok) {
      error = "unknown key '" + key.trim().str() + "' (expected " +
              knownKeys.str() + ")";
      return failure();
    }
    if (!*ok) {
      error = "bad value in '" + entry.trim().str() + "'" +
              (expected.empty() ? "" : " (expected " + expected + ")");
      return failure();
    }
  }
  return success();
}

/// Whether `value` is one of `choices`, which `expected` then lists.
bool oneOf(llvm::StringRef value, llvm::ArrayRef<llvm::StringRef> choices,
           std::string &expected) {
  expected = llvm::join(choices, ", ");
  return llvm::is_contained(choices, value);
}

/// "0" or "1" into `field`.
template <typename Field> bool parseFlag(llvm::StringRef value, Field &field) {
  if (value != "0" && value != "1")
    return false;
  field = value == "1";
  return true;
}
} // namespace

FailureOr<PlanConstraints>
mlir::moe::parsePlanConstraints(llvm::StringRef text, std::string &error) {
  PlanConstraints c;
  auto apply = [&](llvm::StringRef key, llvm::StringRef value,
                   std::string &expected) -> std::optional<bool> {
    auto number = [&](std::optional<int64_t> &field) {
      int64_t n;
      if (value.getAsInteger(10, n) || n < 1)
        return false;
      field = n;
      return true;
    };
    if (key == "tp")
      return number(c.tp);
    if (key == "pp")
      return number(c.pp);
    if (key == "vpp")
      return number(c.virtualStages);
    if (key == "ep")
      return number(c.ep);
    if (key == "etp")
      return number(c.etp);
    if (key == "zero1")
      return parseFlag(value, c.zero1);
    if (key == "cp")
      return number(c.cp);
    if (key == "mb")
      return number(c.microbatchSize);
    if (key == "fsdp")
      return parseFlag(value, c.fsdp);
    if (key == "fp8")
      return parseFlag(value, c.fp8);
    if (key == "remat") {
      c.remat = llvm::StringSwitch<Remat>(value)
                    .Case("selective", Remat::Selective)
                    .Case("full", Remat::Full)
                    .Default(Remat::None);
      return oneOf(value, {"none", "selective", "full"}, expected);
    }
    if (key == "schedule") {
      c.schedule = llvm::StringSwitch<pp::ScheduleKind>(value)
                       .Case("interleaved", pp::ScheduleKind::Interleaved1F1B)
                       .Case("zero-bubble", pp::ScheduleKind::ZeroBubble)
                       .Case("gpipe", pp::ScheduleKind::GPipe)
                       .Default(pp::ScheduleKind::OneFOneB);
      return oneOf(value, {"1f1b", "interleaved", "zero-bubble", "gpipe"},
                   expected);
    }
    return std::nullopt;
  };
  if (failed(
          forEachEntry(text,
                       "tp, pp, vpp, ep, etp, cp, mb, fsdp, zero1, fp8, remat, "
                       "schedule",
                       error, apply)))
    return failure();
  return c;
}

FailureOr<SoftwareTraits>
mlir::moe::parseSoftwareTraits(llvm::StringRef text, std::string &error,
                               const PrecisionRecipe &precision) {
  SoftwareTraits traits = withPrecision(SoftwareTraits(), precision);
  std::string bytesKey;
  auto apply = [&](llvm::StringRef key, llvm::StringRef value,
                   std::string &expected) -> std::optional<bool> {
    auto bytes = [&](double &field) {
      double n;
      if (value.getAsDouble(n) || !(n > 0 && n <= 16))
        return false;
      field = n;
      // The bytes are now another software's, not the recipe's.
      traits.precision = std::nullopt;
      if (bytesKey.empty())
        bytesKey = key.str();
      return true;
    };
    if (key == "runtime") {
      traits.moeRun = value == "moe-run";
      return oneOf(value, {"moe-run", "other"}, expected);
    }
    if (key == "attention") {
      // Which kernels the GPU has an efficiency for is checked against
      // the cluster (checkAttentionKernel).
      traits.attentionKernel = value.str();
      return oneOf(value, {"moe-run", "flash2", "flash3", "cudnn", "unfused"},
                   expected);
    }
    if (key == "imbalance") {
      double n;
      if (value.getAsDouble(n) || !(n >= 1 && n <= 64))
        return false;
      traits.expertImbalance = n;
      return true;
    }
    if (key == "ep-overlap") {
      traits.batchLevelExpertOverlap = value == "batch";
      return oneOf(value, {"none", "batch"}, expected);
    }
    if (key == "fp8-dispatch")
      return parseFlag(value, traits.fp8Dispatch);
    if (key == "dispatcher") {
      traits.dedupedDispatch = value == "deepep";
      return oneOf(value, {"alltoall", "deepep"}, expected);
    }
    if (key == "pp-overlap")
      return parseFlag(value, traits.overlapPipeline);
    if (key == "fusion")
      return parseFlag(value, traits.fusedElementwise);
    if (key == "expert-chunks")
      return parseFlag(value, traits.chunkedExpertExchange);
    if (key == "dp-overlap")
      return parseFlag(value, traits.overlapDataParallel);
    if (key == "tp-overlap")
      return parseFlag(value, traits.overlapTensorParallel);
    if (key == "cp-overlap")
      return parseFlag(value, traits.overlapContextParallel);
    if (key == "fp8") {
      traits.fp8AllLinears = value == "linears";
      return oneOf(value, {"experts", "linears"}, expected);
    }
    if (key == "weight-bytes")
      return bytes(traits.weightBytes);
    if (key == "gradient-bytes")
      return bytes(traits.gradientBytes);
    if (key == "optimizer-bytes")
      return bytes(traits.optimizerBytes);
    if (key == "activation-bytes")
      return bytes(traits.activationBytes);
    return std::nullopt;
  };
  if (failed(forEachEntry(text,
                          "runtime, attention, fusion, expert-chunks, "
                          "imbalance, dispatcher, fp8-dispatch, ep-overlap, "
                          "dp-overlap, tp-overlap, cp-overlap, pp-overlap, "
                          "fp8, "
                          "weight-bytes, gradient-bytes, optimizer-bytes, "
                          "activation-bytes",
                          error, apply)))
    return failure();
  if (traits.moeRun && !bytesKey.empty()) {
    error = bytesKey + " describes another software's run (runtime=other); "
                       "moe-run's bytes are the compiled precision's "
                       "(--precision, --grad-reduce-dtype)";
    return failure();
  }
  return traits;
}
