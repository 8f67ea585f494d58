//===- Internal.h - helpers shared inside moe_pipeline ----------*- C++ -*-===//
//
// Not installed: the per-action cost model used by both the simulator and the
// ZeroBubble builder, which must agree exactly so that the builder's greedy
// timeline is the one simulate() reproduces.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_PIPELINE_INTERNAL_H
#define MOE_LIB_PIPELINE_INTERNAL_H

#include "moe/Pipeline/Schedule.h"

namespace moe::pipeline::detail {

/// Cost of one action on one chunk: options' costs are per rank, split evenly
/// over the v chunks.
inline double costOf(ActionKind kind, const ScheduleOptions &opts) {
  double v = opts.virtualStages;
  switch (kind) {
  case ActionKind::Forward:
    return opts.forwardCost / v;
  case ActionKind::BackwardInput:
    return opts.backwardInputCost / v;
  case ActionKind::BackwardWeight:
    return opts.backwardWeightCost / v;
  case ActionKind::Backward:
    return (opts.backwardInputCost + opts.backwardWeightCost) / v;
  }
  return 0;
}

/// Builds ZB-H1 (ZeroBubble.cpp); opts already validated.
Schedule buildZeroBubble(const ScheduleOptions &opts);

} // namespace moe::pipeline::detail

#endif // MOE_LIB_PIPELINE_INTERNAL_H
