#!/usr/bin/env python3
"""Exits 0 iff two moe-run metrics files hold the same training values
(loss, cross-entropy, aux loss, grad norm, lr) at every step to a relative
tolerance: a partitioned run against the single-rank run of the same model,
whose sums are added in another order. Prints the largest relative
difference of each key."""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("reference")
parser.add_argument("run")
parser.add_argument("--keys", default="loss,ce_loss,aux_loss,grad_norm,lr")
parser.add_argument("--rtol", type=float, default=1e-5)
parser.add_argument("--from-step", type=int, default=0,
                    help="compare the steps from this one on (a resumed run)")
parser.add_argument("--until-step", type=int, default=None,
                    help="compare the steps before this one only")
parser.add_argument("--run-steps", action="store_true",
                    help="compare the reference only at the steps the run has "
                         "(a run resumed at a step not known in advance)")
args = parser.parse_args()
KEYS = args.keys.split(",")


def load(path):
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if r["step"] >= args.from_step and
            (args.until_step is None or r["step"] < args.until_step)]


reference, run = load(args.reference), load(args.run)
if args.run_steps:
    steps = {r["step"] for r in run}
    reference = [r for r in reference if r["step"] in steps]
if len(reference) != len(run):
    sys.exit(f"{len(reference)} steps vs {len(run)} steps")
if not reference:
    sys.exit("no steps to compare")
worst = {key: 0.0 for key in KEYS}
for a, b in zip(reference, run):
    if a["step"] != b["step"]:
        sys.exit(f"step {a['step']} vs step {b['step']}")
    for key in KEYS:
        if (key in a) != (key in b):
            sys.exit(f"step {a['step']}: '{key}' is in only one run")
        if key not in a:
            continue
        x, y = float(a[key]), float(b[key])
        diff = abs(x - y) / max(abs(x), abs(y), 1e-30) if x != y else 0.0
        worst[key] = max(worst[key], diff)
        if diff > args.rtol:
            sys.exit(f"step {a['step']}: {key} {x} vs {y} differs by "
                     f"{diff:.3g} relative (tolerance {args.rtol:g})")
summary = ", ".join(f"{k} {v:.2g}" for k, v in worst.items())
print(f"within {args.rtol:g} over {len(run)} steps; max relative difference: "
      f"{summary}")
