//===- ExpertLoadProbe.h - per-layer expert load for the metrics -*- C++
//-*-===//
//
// Reads each router's load counter (ExpertLoad's, summed over the step's
// microbatches and data ranks) and selection bias right before the
// ExpertLoadUpdate that clears the counter and moves the bias, and turns
// them into the metrics a user watches balancing with: per MoE layer the
// least and most loaded experts' token counts, the coefficient of
// variation, and the spread of the bias the step selected by.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TRAIN_EXPERTLOADPROBE_H
#define MOE_RUNTIME_TRAIN_EXPERTLOADPROBE_H

#include "moe/Runtime/Train/StepDump.h"

#include <string>
#include <utility>
#include <vector>

namespace moe::rt::train {

class ExpertLoadProbe {
public:
  explicit ExpertLoadProbe(StepState state);
  /// To be called from StepHooks::beforeInstruction.
  void before(size_t index);
  /// The values, in program order of the counters: four per counter (min,
  /// max, coefficient of variation, bias max - min) and whether this rank
  /// read it (1) or not (0). A pipeline rank reads its own stages'
  /// counters only: summing the values over the stages gives every one.
  std::vector<double> &values() { return slots; }
  /// The metrics of values() (summed over the stages), named by layer:
  /// load_min.L, load_max.L, load_cv.L and, with a bias, bias_range.L.
  std::vector<std::pair<std::string, double>> metrics() const;
  bool empty() const { return counters.empty(); }

private:
  struct Counter {
    size_t instruction;
    std::string layer;
    bool biased;
  };
  static constexpr size_t kSlotsPerCounter = 5;
  StepState state;
  std::vector<Counter> counters;
  std::vector<double> slots;
};

} // namespace moe::rt::train

#endif // MOE_RUNTIME_TRAIN_EXPERTLOADPROBE_H
