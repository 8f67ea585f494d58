//===- Simulate.cpp - timing a schedule by list scheduling ----------------===//
//
// Each rank runs its list in order, so an action's start time is fixed once
// its predecessor on the rank and its cross-rank dependencies have ended; the
// order in which ranks are visited does not change the result. Sweeping the
// ranks until none can advance either places every action or leaves each
// rank waiting on another: a cycle in the orders, reported as a deadlock (the
// runtime would hang on it too).
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <limits>

namespace moe::pipeline {
namespace {

std::string describe(const Action &a) {
  return std::string(toString(a.kind)) + std::to_string(a.microbatch) +
         " (chunk " + std::to_string(a.chunk) + ")";
}

} // namespace

ErrorOr<Timeline> simulate(const Schedule &schedule,
                           const ScheduleOptions &opts) {
  if (auto error = verifySchedule(schedule))
    return Error{"invalid schedule: " + *error};
  if (auto error = validateOptions(schedule.kind, opts))
    return Error{*error};
  if (opts.stages != schedule.stages ||
      opts.virtualStages != schedule.virtualStages ||
      opts.microbatches != schedule.microbatches)
    return Error{"options do not match the schedule's stages, virtualStages "
                 "or microbatches"};

  int p = schedule.stages, m = schedule.microbatches;
  int numStages = p * schedule.virtualStages;
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // End of F and of the input-grad-producing backward (B or fused) per
  // (model stage, microbatch).
  std::vector<double> fEnd(size_t(numStages) * m, kNotYet);
  std::vector<double> bEnd(size_t(numStages) * m, kNotYet);
  auto at = [m](int stage, int i) { return size_t(stage) * m + i; };

  Timeline timeline;
  timeline.stages = p;
  timeline.virtualStages = schedule.virtualStages;
  timeline.ranks.resize(p);
  std::vector<double> freeAt(p, 0);
  size_t remaining = 0;
  for (const auto &order : schedule.ranks)
    remaining += order.size();

  // Returns when `a` may start, or infinity while a dependency is unplaced.
  auto readyAt = [&](const Action &a) {
    int s = schedule.modelStageOf(a);
    int i = a.microbatch;
    switch (a.kind) {
    case ActionKind::Forward:
      return s == 0 ? 0.0 : fEnd[at(s - 1, i)];
    case ActionKind::BackwardInput:
    case ActionKind::Backward:
      return std::max(fEnd[at(s, i)],
                      s == numStages - 1 ? 0.0 : bEnd[at(s + 1, i)]);
    case ActionKind::BackwardWeight:
      return bEnd[at(s, i)];
    }
    return kNotYet;
  };

  bool progress = true;
  while (remaining > 0 && progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const std::vector<Action> &order = schedule.ranks[r];
      std::vector<TimedAction> &placed = timeline.ranks[r];
      while (placed.size() < order.size()) {
        const Action &a = order[placed.size()];
        double ready = readyAt(a);
        if (ready == kNotYet)
          break;
        TimedAction t;
        t.action = a;
        t.start = std::max(ready, freeAt[r]);
        t.end = t.start + detail::costOf(a.kind, opts);
        freeAt[r] = t.end;
        int s = schedule.modelStageOf(a);
        if (a.kind == ActionKind::Forward)
          fEnd[at(s, a.microbatch)] = t.end;
        else if (a.kind != ActionKind::BackwardWeight)
          bEnd[at(s, a.microbatch)] = t.end;
        placed.push_back(t);
        --remaining;
        progress = true;
      }
    }
  }

  if (remaining > 0) {
    std::string message = "deadlock:";
    for (int r = 0; r < p; ++r) {
      size_t next = timeline.ranks[r].size();
      if (next < schedule.ranks[r].size())
        message += " rank " + std::to_string(r) + " blocked at " +
                   describe(schedule.ranks[r][next]) + ";";
    }
    message.pop_back();
    return Error{message};
  }

  double busy = 0;
  for (int r = 0; r < p; ++r) {
    for (const TimedAction &t : timeline.ranks[r]) {
      busy += t.end - t.start;
      timeline.makespan = std::max(timeline.makespan, t.end);
    }
  }
  timeline.bubbleFraction =
      timeline.makespan > 0 ? 1 - busy / (p * timeline.makespan) : 0;
  return timeline;
}

} // namespace moe::pipeline
