//===- Schedule.cpp - build and verify pipeline schedules -----------------===//
//
// GPipe, 1F1B and interleaved 1F1B have fixed orders that depend only on
// (p, m, v); they are written out here directly. ZeroBubble's order depends
// on the costs and lives in ZeroBubble.cpp.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>

namespace moe::pipeline {
namespace {

// Bounds the schedule size so absurd options give an error, not an
// out-of-memory abort.
constexpr int64_t kMaxActionsPerKind = int64_t(1) << 24;

Action makeAction(ActionKind kind, int rank, int chunk, int microbatch) {
  Action a;
  a.kind = kind;
  a.rank = rank;
  a.chunk = chunk;
  a.microbatch = microbatch;
  return a;
}

Schedule emptySchedule(ScheduleKind kind, const ScheduleOptions &opts) {
  Schedule s;
  s.kind = kind;
  s.stages = opts.stages;
  s.virtualStages = opts.virtualStages;
  s.microbatches = opts.microbatches;
  s.ranks.resize(opts.stages);
  return s;
}

Schedule buildGPipe(const ScheduleOptions &opts) {
  Schedule s = emptySchedule(ScheduleKind::GPipe, opts);
  for (int r = 0; r < opts.stages; ++r) {
    for (int i = 0; i < opts.microbatches; ++i)
      s.ranks[r].push_back(makeAction(ActionKind::Forward, r, 0, i));
    for (int i = 0; i < opts.microbatches; ++i)
      s.ranks[r].push_back(makeAction(ActionKind::Backward, r, 0, i));
  }
  return s;
}

Schedule buildOneFOneB(const ScheduleOptions &opts) {
  Schedule s = emptySchedule(ScheduleKind::OneFOneB, opts);
  int p = opts.stages, m = opts.microbatches;
  for (int r = 0; r < p; ++r) {
    std::vector<Action> &order = s.ranks[r];
    // Rank r runs p - r - 1 forwards ahead so the pipe fills, then
    // alternates, so at most p - r activations are ever alive.
    int warmup = std::min(p - r - 1, m);
    int nextF = 0, nextB = 0;
    for (; nextF < warmup; ++nextF)
      order.push_back(makeAction(ActionKind::Forward, r, 0, nextF));
    while (nextF < m) {
      order.push_back(makeAction(ActionKind::Forward, r, 0, nextF++));
      order.push_back(makeAction(ActionKind::Backward, r, 0, nextB++));
    }
    while (nextB < m)
      order.push_back(makeAction(ActionKind::Backward, r, 0, nextB++));
  }
  return s;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th
// forward of a rank runs chunk (k / p) % v on microbatch (k / pv) * p + k % p,
// i.e. groups of p microbatches go through chunk 0, then chunk 1, ...;
// backwards walk the chunks in reverse.
Schedule buildInterleaved(const ScheduleOptions &opts) {
  Schedule s = emptySchedule(ScheduleKind::Interleaved1F1B, opts);
  int p = opts.stages, m = opts.microbatches, v = opts.virtualStages;
  int total = m * v;
  auto step = [&](int r, int k, bool forward) {
    int inGroup = k % (p * v);
    int chunk = inGroup / p;
    if (!forward)
      chunk = v - 1 - chunk;
    int microbatch = (k / (p * v)) * p + inGroup % p;
    return makeAction(forward ? ActionKind::Forward : ActionKind::Backward, r,
                      chunk, microbatch);
  };
  for (int r = 0; r < p; ++r) {
    // Enough forwards in flight that the first backward's inputs have come
    // around all v chunks; with m == p there is no steady state at all.
    int warmup =
        m == p ? total : std::min(total, (p - r - 1) * 2 + (v - 1) * p);
    std::vector<Action> &order = s.ranks[r];
    for (int k = 0; k < warmup; ++k)
      order.push_back(step(r, k, true));
    int steady = total - warmup;
    for (int k = 0; k < steady; ++k) {
      order.push_back(step(r, warmup + k, true));
      order.push_back(step(r, k, false));
    }
    for (int k = steady; k < total; ++k)
      order.push_back(step(r, k, false));
  }
  return s;
}

bool positiveFinite(double x) { return std::isfinite(x) && x > 0; }

} // namespace

const char *toString(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved1F1B:
    return "interleaved-1f1b";
  case ScheduleKind::ZeroBubble:
    return "zero-bubble";
  }
  return "unknown";
}

const char *toString(ActionKind kind) {
  switch (kind) {
  case ActionKind::Forward:
    return "F";
  case ActionKind::BackwardInput:
  case ActionKind::Backward:
    return "B";
  case ActionKind::BackwardWeight:
    return "W";
  }
  return "?";
}

std::optional<std::string> validateOptions(ScheduleKind kind,
                                           const ScheduleOptions &opts) {
  if (opts.stages < 1)
    return "stages must be >= 1, got " + std::to_string(opts.stages);
  if (opts.microbatches < 1)
    return "microbatches must be >= 1, got " +
           std::to_string(opts.microbatches);
  if (opts.virtualStages < 1)
    return "virtualStages must be >= 1, got " +
           std::to_string(opts.virtualStages);
  if (kind != ScheduleKind::Interleaved1F1B && opts.virtualStages != 1)
    return std::string(toString(kind)) + " needs virtualStages == 1, got " +
           std::to_string(opts.virtualStages);
  if (kind == ScheduleKind::Interleaved1F1B &&
      opts.microbatches % opts.stages != 0)
    return "interleaved-1f1b needs microbatches (" +
           std::to_string(opts.microbatches) +
           ") to be a multiple of stages (" + std::to_string(opts.stages) + ")";
  if (int64_t(opts.stages) * opts.virtualStages * opts.microbatches >
      kMaxActionsPerKind)
    return "stages * virtualStages * microbatches is too large";
  if (!positiveFinite(opts.forwardCost) ||
      !positiveFinite(opts.backwardInputCost) ||
      !positiveFinite(opts.backwardWeightCost))
    return "costs must be finite and > 0";
  return std::nullopt;
}

ErrorOr<Schedule> buildSchedule(ScheduleKind kind,
                                const ScheduleOptions &opts) {
  if (auto error = validateOptions(kind, opts))
    return Error{*error};
  switch (kind) {
  case ScheduleKind::GPipe:
    return buildGPipe(opts);
  case ScheduleKind::OneFOneB:
    return buildOneFOneB(opts);
  case ScheduleKind::Interleaved1F1B:
    return buildInterleaved(opts);
  case ScheduleKind::ZeroBubble:
    return detail::buildZeroBubble(opts);
  }
  return Error{"unknown schedule kind"};
}

bool actionRuns(ActionKind kind, Phase phase) {
  switch (kind) {
  case ActionKind::Forward:
    return phase == Phase::Forward;
  case ActionKind::BackwardInput:
    return phase == Phase::Backward;
  case ActionKind::BackwardWeight:
    return phase == Phase::BackwardWeight;
  case ActionKind::Backward:
    return phase == Phase::Backward || phase == Phase::BackwardWeight;
  }
  return false;
}

bool runsBefore(int fromStage, Phase from, int toStage, Phase to) {
  switch (from) {
  case Phase::Forward:
    return to != Phase::Forward || fromStage <= toStage;
  case Phase::Backward:
    return to != Phase::Forward && fromStage >= toStage;
  case Phase::BackwardWeight:
    return to == Phase::BackwardWeight && fromStage == toStage;
  case Phase::Optimizer:
    return false;
  }
  return false;
}

std::optional<std::string> verifySchedule(const Schedule &schedule) {
  int p = schedule.stages, v = schedule.virtualStages,
      m = schedule.microbatches;
  if (p < 1 || v < 1 || m < 1)
    return std::string("schedule has non-positive stages, virtualStages or "
                       "microbatches");
  if (int64_t(p) * v * m > kMaxActionsPerKind)
    return std::string("schedule is too large");
  if (schedule.ranks.size() != size_t(p))
    return "schedule lists " + std::to_string(schedule.ranks.size()) +
           " ranks for " + std::to_string(p) + " stages";
  // Counts per (model stage, microbatch) and action kind.
  std::vector<int> counts(size_t(p) * v * m * 4, 0);
  for (int r = 0; r < p; ++r) {
    for (const Action &a : schedule.ranks[r]) {
      if (a.rank != r)
        return "rank " + std::to_string(r) + " lists an action of rank " +
               std::to_string(a.rank);
      if (a.chunk < 0 || a.chunk >= v || a.microbatch < 0 || a.microbatch >= m)
        return "rank " + std::to_string(r) + " has chunk " +
               std::to_string(a.chunk) + " microbatch " +
               std::to_string(a.microbatch) + " out of range";
      int kind = int(a.kind);
      if (kind < 0 || kind > 3)
        return std::string("invalid action kind");
      size_t stage = schedule.modelStageOf(a);
      ++counts[(stage * m + a.microbatch) * 4 + kind];
    }
  }
  for (int s = 0; s < p * v; ++s) {
    for (int i = 0; i < m; ++i) {
      const int *c = &counts[(size_t(s) * m + i) * 4];
      int f = c[int(ActionKind::Forward)],
          bi = c[int(ActionKind::BackwardInput)],
          bw = c[int(ActionKind::BackwardWeight)],
          fused = c[int(ActionKind::Backward)];
      bool ok = f == 1 && ((fused == 1 && bi == 0 && bw == 0) ||
                           (fused == 0 && bi == 1 && bw == 1));
      if (!ok)
        return "model stage " + std::to_string(s) + " microbatch " +
               std::to_string(i) + " has " + std::to_string(f) + " F, " +
               std::to_string(fused) + " fused B, " + std::to_string(bi) +
               " B and " + std::to_string(bw) +
               " W (need 1 F and 1 fused B, or 1 B and 1 W)";
    }
  }
  return std::nullopt;
}

std::vector<int> peakInFlight(const Schedule &schedule) {
  std::vector<int> peaks;
  for (const std::vector<Action> &order : schedule.ranks) {
    int alive = 0, peak = 0;
    for (const Action &a : order) {
      if (a.kind == ActionKind::Forward)
        peak = std::max(peak, ++alive);
      else if (a.kind == ActionKind::Backward ||
               a.kind == ActionKind::BackwardWeight)
        --alive;
    }
    peaks.push_back(peak);
  }
  return peaks;
}

int peakOpenMicrobatches(const std::vector<int> &order) {
  std::map<int, int> left;
  for (int microbatch : order)
    ++left[microbatch];
  std::set<int> started;
  int open = 0, peak = 1;
  for (int microbatch : order) {
    if (started.insert(microbatch).second)
      peak = std::max(peak, ++open);
    if (--left[microbatch] == 0)
      --open;
  }
  return peak;
}

std::vector<int> peakMicrobatchSlots(const Schedule &schedule) {
  std::vector<int> peaks;
  for (const std::vector<Action> &actions : schedule.ranks) {
    std::vector<int> order;
    for (const Action &a : actions)
      order.push_back(a.microbatch);
    peaks.push_back(peakOpenMicrobatches(order));
  }
  return peaks;
}

} // namespace moe::pipeline
