#!/usr/bin/env python3
"""Exits 0 iff the mean loss of the last N steps of a moe-run metrics file is
within a relative tolerance of the reference run's: training that follows a
different (not bit-comparable) numeric path, such as FP8 GEMMs, must end
where the fp32 run ends. Prints both means and their relative difference."""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("reference")
parser.add_argument("run")
parser.add_argument("--last", type=int, default=20)
parser.add_argument("--rtol", type=float, default=0.02)
args = parser.parse_args()


def mean_loss(path):
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if len(records) < args.last:
        sys.exit(f"{path}: {len(records)} steps, fewer than {args.last}")
    return sum(r["loss"] for r in records[-args.last:]) / args.last


reference, run = mean_loss(args.reference), mean_loss(args.run)
difference = (run - reference) / reference
print(f"mean loss of the last {args.last} steps: {run:.4f} vs {reference:.4f} "
      f"({difference:+.2%})")
if abs(difference) > args.rtol:
    sys.exit(f"differs by more than {args.rtol:.0%}")
print(f"within {args.rtol:.0%}")
