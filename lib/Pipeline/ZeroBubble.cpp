//===- ZeroBubble.cpp - ZB-H1 schedule by list scheduling -----------------===//
//
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism") keeps 1F1B's memory
// bound but splits each backward into B (input grad, which the previous stage
// waits for) and W (weight grad, which nobody waits for). Rather than
// hard-coding where the W passes go, which is only right for particular cost
// ratios, the order is found by simulating all ranks together: whenever a rank
// is free it runs, in priority order,
//   1. the next B if its inputs are ready (it unblocks the rank before),
//   2. the next F if ready and fewer than p - r microbatches are between F
//      and B on this rank (1F1B's activation bound),
//   3. the oldest pending W (filling what would otherwise be a bubble).
// The resulting per-rank orders are the schedule; simulate() replays them to
// the same timeline because both use detail::costOf.
//
// With equal costs this reaches ZB-H1's makespan m(F+B+W) + (p-1)(F+B-W).
// W passes are not bounded: later ranks defer many of them (the last rank
// all of them) because their cooldown is where the bubble is, so those W
// inputs (stage input and output grad, smaller than B's activations) stay
// alive. Forcing W earlier (tried: at most p - r - 1 or r pending) lengthens
// the makespan, so a memory cap on pending W is left to a later option.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <functional>
#include <limits>
#include <queue>

namespace moe::pipeline::detail {

Schedule buildZeroBubble(const ScheduleOptions &opts) {
  int p = opts.stages, m = opts.microbatches;
  Schedule s;
  s.kind = ScheduleKind::ZeroBubble;
  s.stages = p;
  s.virtualStages = 1;
  s.microbatches = m;
  s.ranks.resize(p);

  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // End times of F and B per (rank, microbatch); infinity until scheduled.
  std::vector<std::vector<double>> fEnd(p, std::vector<double>(m, kNotYet));
  std::vector<std::vector<double>> bEnd(p, std::vector<double>(m, kNotYet));
  std::vector<int> nextF(p, 0), nextB(p, 0), nextW(p, 0);
  std::vector<double> freeAt(p, 0);
  // Pending end times: the only instants at which a rank's choice can change.
  std::priority_queue<double, std::vector<double>, std::greater<double>> events;

  auto run = [&](int r, ActionKind kind, int i, double now) {
    double end = now + costOf(kind, opts);
    Action a;
    a.kind = kind;
    a.rank = r;
    a.microbatch = i;
    s.ranks[r].push_back(a);
    freeAt[r] = end;
    events.push(end);
    if (kind == ActionKind::Forward)
      fEnd[r][i] = end;
    else if (kind == ActionKind::BackwardInput)
      bEnd[r][i] = end;
  };

  double now = 0;
  size_t remaining = size_t(p) * m * 3;
  while (remaining > 0) {
    for (int r = 0; r < p; ++r) {
      if (freeAt[r] > now)
        continue;
      int b = nextB[r], f = nextF[r], w = nextW[r];
      bool bReady =
          b < m && fEnd[r][b] <= now && (r == p - 1 || bEnd[r + 1][b] <= now);
      bool fReady = f < m && f - b < p - r && (r == 0 || fEnd[r - 1][f] <= now);
      bool wReady = w < b && bEnd[r][w] <= now;
      if (bReady) {
        run(r, ActionKind::BackwardInput, b, now);
        ++nextB[r];
      } else if (fReady) {
        run(r, ActionKind::Forward, f, now);
        ++nextF[r];
      } else if (wReady) {
        run(r, ActionKind::BackwardWeight, w, now);
        ++nextW[r];
      } else {
        continue;
      }
      --remaining;
    }
    // Rank 0's first F is always ready, and afterwards some action is always
    // running until all are done, so the queue cannot run dry early.
    while (!events.empty() && events.top() <= now)
      events.pop();
    if (events.empty())
      break;
    now = events.top();
  }
  return s;
}

} // namespace moe::pipeline::detail
