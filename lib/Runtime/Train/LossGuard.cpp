//===- LossGuard.cpp - stop a run whose loss exploded ---------------------===//
#include "moe/Runtime/Train/LossGuard.h"

#include "moe/Runtime/Engine/Executor.h"

#include "absl/strings/str_format.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moe::rt::train {

double defaultMaxLoss(int64_t vocab) {
  if (vocab < 2)
    return 0;
  return kDefaultMaxLossPerLnVocab * std::log(static_cast<double>(vocab));
}

absl::Status validateLossLimits(const LossLimits &limits) {
  if (limits.maxLoss && !(*limits.maxLoss >= 0))
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max-loss must be >= 0 (0 or inf disables the check), got %g",
        *limits.maxLoss));
  if (!(limits.spikeFactor == 0 ||
        (limits.spikeFactor > 1 && std::isfinite(limits.spikeFactor))))
    return absl::InvalidArgumentError(absl::StrFormat(
        "--loss-spike-factor must be 0 (off) or a finite number above 1, "
        "got %g",
        limits.spikeFactor));
  if (limits.spikeWindow < 1)
    return absl::InvalidArgumentError(absl::StrFormat(
        "--loss-spike-window must be at least 1 step, got %d",
        limits.spikeWindow));
  return absl::OkStatus();
}

LossGuard::LossGuard(const LossLimits &limits, int64_t vocab)
    : limits_(limits), vocab_(vocab) {
  defaultCeiling_ = !limits.maxLoss;
  maxLoss_ = limits.maxLoss ? *limits.maxLoss : defaultMaxLoss(vocab);
  if (std::isinf(maxLoss_))
    maxLoss_ = 0;
}

std::string LossGuard::ceilingName() const {
  if (!defaultCeiling_)
    return absl::StrFormat("--max-loss %g", maxLoss_);
  return absl::StrFormat(
      "the maximum %.4g (%g x ln(vocab %d), the default of --max-loss; 0 "
      "disables it)",
      maxLoss_, kDefaultMaxLossPerLnVocab, vocab_);
}

absl::Status LossGuard::check(int64_t step, double loss, std::string *warning) {
  warning->clear();
  if (maxLoss_ > 0 && loss > maxLoss_)
    return absl::InvalidArgumentError(atStep(
        step, absl::StrFormat("loss %.6g exceeds %s", loss, ceilingName())));
  if (limits_.spikeFactor <= 0)
    return absl::OkStatus();
  size_t window = static_cast<size_t>(limits_.spikeWindow);
  if (recent_.size() == window) {
    std::vector<double> sorted(recent_.begin(), recent_.end());
    std::sort(sorted.begin(), sorted.end());
    size_t n = sorted.size();
    double median =
        n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    if (median > 0 && loss > limits_.spikeFactor * median) {
      std::string message = atStep(
          step,
          absl::StrFormat("loss %.6g is a spike: %.3g times the median %.6g "
                          "of the previous %d step%s (--loss-spike-factor %g)",
                          loss, loss / median, median, window,
                          window == 1 ? "" : "s", limits_.spikeFactor));
      if (limits_.spikeAction == LossSpikeAction::Error)
        return absl::InvalidArgumentError(message);
      *warning = message;
    }
    recent_.pop_front();
  }
  recent_.push_back(loss);
  return absl::OkStatus();
}

} // namespace moe::rt::train
