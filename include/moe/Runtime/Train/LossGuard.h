//===- LossGuard.h - stop a run whose loss exploded -------------*- C++ -*-===//
//
// A non-finite loss stops the step inside the executor. A loss that is
// finite but absurd (3.4e13 after a bad learning rate or initialisation)
// would train on silently; this guard checks every step's loss against
//   * a ceiling (--max-loss), by default kDefaultMaxLossPerLnVocab x
//     ln(vocab): a healthy run starts near ln(vocab), the loss of uniform
//     predictions, and falls from there;
//   * optionally, a spike detector (--loss-spike-factor): a loss above F
//     times the median of the previous N steps' losses. Megatron-LM's
//     --check-for-spiky-loss flags a loss above 10 times the largest of its
//     first 100 iterations; a median of the recent steps follows the falling
//     curve, so a spike late in training is found too, and one spike does
//     not move the reference.
// The loss is the same on every rank (pipelines share the last stage's),
// so every rank reaches the same verdict at the same step.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TRAIN_LOSSGUARD_H
#define MOE_RUNTIME_TRAIN_LOSSGUARD_H

#include "absl/status/status.h"

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace moe::rt::train {

/// The default ceiling is this many times ln(vocab).
inline constexpr double kDefaultMaxLossPerLnVocab = 10.0;
/// The spike detector's window when none is given.
inline constexpr int64_t kDefaultLossSpikeWindow = 100;

/// What a spike does.
enum class LossSpikeAction { Error, Warn };

struct LossLimits {
  /// The ceiling; the default of the vocabulary when absent; 0 or +inf
  /// disables it.
  std::optional<double> maxLoss;
  /// A loss above spikeFactor times the median of the previous spikeWindow
  /// losses is a spike; 0 disables the detector. Judged once the window is
  /// full.
  double spikeFactor = 0;
  int64_t spikeWindow = kDefaultLossSpikeWindow;
  LossSpikeAction spikeAction = LossSpikeAction::Error;
};

/// kDefaultMaxLossPerLnVocab x ln(vocab); none (0) below two tokens.
double defaultMaxLoss(int64_t vocab);

/// Checks the limits themselves: a ceiling >= 0 (not NaN), a factor of 0 or
/// more than 1 and finite, a window of at least 1. Errors name the flag.
absl::Status validateLossLimits(const LossLimits &limits);

class LossGuard {
public:
  /// `limits` must be valid; `vocab` gives the default ceiling.
  LossGuard(const LossLimits &limits, int64_t vocab);

  /// Checks the finite loss of 0-based step `step`. An error names the step
  /// (as people number it) and the loss; a spike in Warn mode returns OK
  /// and its message in `*warning` (cleared otherwise).
  absl::Status check(int64_t step, double loss, std::string *warning);

  /// The ceiling in force; 0 when off.
  double maxLoss() const { return maxLoss_; }

private:
  std::string ceilingName() const;

  LossLimits limits_;
  double maxLoss_ = 0;
  bool defaultCeiling_ = false;
  int64_t vocab_ = 0;
  std::deque<double> recent_;
};

} // namespace moe::rt::train

#endif // MOE_RUNTIME_TRAIN_LOSSGUARD_H
