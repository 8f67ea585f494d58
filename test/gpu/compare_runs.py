#!/usr/bin/env python3
"""Compares a GPU's training run with the CPU's (moe-run --metrics, same
artifact, data and seed). Exits 0 iff

  * over the first 5 steps, loss and grad norm are within 2^-6 relative:
    both runs start from the same weights, and one BF16 rounding flipped per
    GEMM output moves them by at most 2^-7 in a step; 2^-6 leaves room for
    the few AdamW updates taken from gradients that differ that much
    (test/gpu/tiny-model.test says the same of the lit test);
  * with --other-seeds (CPU runs of the same artifact from other
    initialisation seeds), the mean loss of the last 10 steps is within 4
    standard deviations of those runs' means around the CPU's: later steps
    part (top-k routing amplifies last-bit differences), so no step is
    compared to a fixed tolerance there, but a GPU run that trains as the
    CPU does stays far inside the spread of other seeds, while a broken one
    (loss not falling, or falling differently) lands many spreads away.

Numpy-free: it runs anywhere python3 does."""
import argparse
import json
import statistics
import sys

parser = argparse.ArgumentParser()
parser.add_argument("reference")
parser.add_argument("run")
parser.add_argument("--other-seeds", nargs="*", default=[])
parser.add_argument("--early-steps", type=int, default=5)
parser.add_argument("--rtol", type=float, default=2.0 ** -6)
parser.add_argument("--late-steps", type=int, default=10)
parser.add_argument("--spreads", type=float, default=4.0)
args = parser.parse_args()


def load(path):
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if not records:
        sys.exit(f"{path}: no steps")
    return records


ref, run = load(args.reference), load(args.run)
if [r["step"] for r in ref] != [r["step"] for r in run]:
    sys.exit(f"steps {[r['step'] for r in run][:3]}..., the CPU's "
             f"{[r['step'] for r in ref][:3]}...")
worst = 0.0
for a, b in list(zip(ref, run))[:args.early_steps]:
    for key in ("loss", "grad_norm"):
        rel = abs(b[key] - a[key]) / abs(a[key])
        if not rel <= args.rtol:
            sys.exit(f"step {a['step']}: {key} {b[key]:.6g}, the CPU's "
                     f"{a[key]:.6g}: {rel:.2e} exceeds {args.rtol:.4g}")
        worst = max(worst, rel)
line = (f"first {min(args.early_steps, len(ref))} steps within {worst:.1e} "
        f"(bound {args.rtol:.4g})")
if args.other_seeds:
    if len(ref) <= args.late_steps:
        sys.exit(f"{len(ref)} steps: too few for the last {args.late_steps}")

    def tail(records):
        return statistics.fmean(r["loss"] for r in records[-args.late_steps:])

    means = [tail(load(path)) for path in args.other_seeds] + [tail(ref)]
    if len(means) < 3:
        sys.exit("--other-seeds: at least two runs are needed for a spread")
    spread = statistics.stdev(means)
    gap = abs(tail(run) - tail(ref))
    if not gap <= args.spreads * spread:
        sys.exit(f"last {args.late_steps} steps: mean loss {tail(run):.4f}, "
                 f"the CPU's {tail(ref):.4f}: {gap:.4f} apart, over "
                 f"{args.spreads:g} x the seeds' spread {spread:.4f}")
    line += (f"; last {args.late_steps} mean loss {tail(run):.4f} vs "
             f"{tail(ref):.4f}, {gap / spread:.2f} seed spreads "
             f"(bound {args.spreads:g})")
print(line)
