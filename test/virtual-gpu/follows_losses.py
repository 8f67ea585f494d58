#!/usr/bin/env python3
"""Exits 0 iff a run's loss follows a reference run's, step by step, within
one step's progress of the reference: |loss_run(t) - loss_ref(t)| at most
(loss_ref(1) - loss_ref(N)) / (N - 1), the reference's mean fall per step
over its N steps. The bound comes from the reference's own curve, so it
follows the model, the data and the learning rate without a constant.

What it says: two runs of one training on the same batches, which part
after a few dozen steps (last-bit differences turned into other routing
choices by top-k), stay within a step of each other; a run that trains a
step ahead or behind (a wrong gradient, update or learning rate), or not at
all, leaves the band. Prints the bound and the largest difference."""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("reference", help="the reference's metrics (JSON lines)")
parser.add_argument("run", help="the run's metrics (JSON lines)")
args = parser.parse_args()


def losses(path):
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [(r["step"], float(r["loss"])) for r in records]


reference, run = losses(args.reference), losses(args.run)
if len(reference) < 2:
    sys.exit(f"{args.reference}: {len(reference)} steps: a mean fall per step "
             "needs 2 or more")
if [step for step, _ in reference] != [step for step, _ in run]:
    sys.exit(f"the runs hold different steps: {len(reference)} vs {len(run)}")
bound = (reference[0][1] - reference[-1][1]) / (len(reference) - 1)
if not bound > 0:
    sys.exit(f"{args.reference}: the loss did not fall ({reference[0][1]} to "
             f"{reference[-1][1]}): no step's progress to bound by")
worst = (0.0, reference[0][0])
for (step, a), (_, b) in zip(reference, run):
    diff = abs(b - a)
    if not diff <= bound:
        sys.exit(f"step {step}: loss {b} vs {a}: {diff:.3g} apart, more than "
                 f"a step's progress ({bound:.3g})")
    worst = max(worst, (diff, step))
print(f"within a step's progress ({bound:.3g}) over {len(run)} steps; "
      f"largest difference {worst[0]:.2g} at step {worst[1]}")
