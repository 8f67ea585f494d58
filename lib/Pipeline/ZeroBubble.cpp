//===- ZeroBubble.cpp - the ZB-H1 schedule --------------------------------===//
//
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism") splits each backward
// into B (input grad, which the previous stage waits for) and W (weight
// grad, which nobody waits for). Each rank keeps 1F1B's order of F and B;
// rank r then runs the W of a microbatch only once r more B passes are done,
// so that a later rank, which idles longest at the start, fills its cooldown
// with the W passes it put off, and the W passes left over run at the end.
//
// With F = B = W this reaches ZB-H1's makespan m(F+B+W) + (p-1)(F+B-W), the
// 1F1B bubble shrunk by 2(p-1)W. At most p - r microbatches sit between F and
// B on rank r (1F1B's bound) and at most p between F and W on any rank (1F1B's
// peak, rank 0's), because W waits for at most r more B passes: a rank keeps
// the activations a pending W reads for that long, and no longer.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>

namespace moe::pipeline::detail {

Schedule buildZeroBubble(const ScheduleOptions &opts) {
  int p = opts.stages, m = opts.microbatches;
  Schedule s;
  s.kind = ScheduleKind::ZeroBubble;
  s.stages = p;
  s.virtualStages = 1;
  s.microbatches = m;
  s.ranks.resize(p);
  for (int r = 0; r < p; ++r) {
    auto push = [&](ActionKind kind, int i) {
      Action a;
      a.kind = kind;
      a.rank = r;
      a.microbatch = i;
      s.ranks[r].push_back(a);
    };
    int deferred = r, w = 0;
    auto afterB = [&](int b) {
      if (b - w >= deferred)
        push(ActionKind::BackwardWeight, w++);
    };
    int warm = std::min(p - r - 1, m), f = 0, b = 0;
    for (; f < warm; ++f)
      push(ActionKind::Forward, f);
    while (b < m) {
      if (f < m)
        push(ActionKind::Forward, f++);
      push(ActionKind::BackwardInput, b);
      afterB(b++);
    }
    while (w < m)
      push(ActionKind::BackwardWeight, w++);
  }
  return s;
}

} // namespace moe::pipeline::detail
