#!/usr/bin/env python3
"""Exits 0 iff a moec --report=memory of a step compiled under
--memory-budget keeps the budget: the peak is at most the budget, some ops
are recomputed, and the recomputed FLOPs are fewer than a full
recomputation's (the whole forward again). Prints the figures it read; the
properties, not the figures, are what the test holds the compiler to."""
import re
import sys

report = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()


def find(pattern, what):
    match = re.search(pattern, report)
    if not match:
        sys.exit(f"no {what} in the report")
    return match.groups()


(peak,) = find(r"total \(peak\) +([0-9.]+) MiB", "'total (peak)'")
(budget,) = find(r"budget +([0-9.]+) MiB", "'budget'")
ops, flops, full = find(r"recomputed in backward: ([0-9]+) ops, ([0-9.e+]+) FLOP "
                        r"\(full recomputation: ([0-9.e+]+)\)", "recomputation line")
peak, budget, ops, flops, full = (float(peak), float(budget), int(ops),
                                  float(flops), float(full))
problems = []
if peak > budget:
    problems.append(f"peak {peak} MiB is over the budget {budget} MiB")
if ops < 1:
    problems.append("nothing is recomputed")
if not flops < full:
    problems.append(f"recomputes {flops:g} FLOP, not fewer than a full "
                    f"recomputation's {full:g}")
if problems:
    sys.exit("; ".join(problems))
print(f"peak {peak:.2f} MiB within the budget {budget:.2f} MiB; "
      f"{ops} ops recomputed, fewer FLOPs than a full recomputation")
