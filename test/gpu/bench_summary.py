#!/usr/bin/env python3
"""The GPU benchmark's figures (test/gpu/run.sh), from moe-run --metrics
files (one JSON line per step: elapsed_s cumulative, flops_per_s by the
artifact's model FLOPs) and the PyTorch peer's (bench/gpu_torch_peer.py,
step_s per step), the first --warmup steps left out.

  bench_summary.py RUN.jsonl --peak FLOPS [--measured FLOPS]
      median step time, model TFLOP/s, MFU against the datasheet peak and
      against the BF16 GEMM rate measured in the same run
  bench_summary.py --compare BF16.jsonl FP8.jsonl PEER.jsonl
      [--profiles BF16.txt FP8.txt]
      the ratios the issue sets goals for: moe-run BF16 against PyTorch's
      step, FP8 against BF16 (whole step and, from --profile's table, the
      expert instructions Experts + ExpertsGrad, where the FP8 GEMMs are)

Goals are reported as met or missed, never as a failure: speed is a
benchmark's figure, not a test's verdict. Numpy-free."""
import argparse
import json
import re
import statistics
import sys

parser = argparse.ArgumentParser()
parser.add_argument("metrics", nargs="?")
parser.add_argument("--peak", type=float)
parser.add_argument("--measured", type=float, default=0.0)
parser.add_argument("--warmup", type=int, default=2)
parser.add_argument("--compare", nargs=3, metavar=("BF16", "FP8", "PEER"))
parser.add_argument("--profiles", nargs=2, metavar=("BF16", "FP8"))
parser.add_argument("--mfu-goal", type=float, default=0.40)
parser.add_argument("--fp8-goal", type=float, default=1.3)
args = parser.parse_args()


def load(path):
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if len(records) <= args.warmup:
        sys.exit(f"{path}: {len(records)} steps, none after {args.warmup} "
                 "warm-up steps")
    return records


def step_times(records):
    """Seconds per step after the warm-up."""
    if "step_s" in records[0]:
        times = [r["step_s"] for r in records]
    else:
        elapsed = [r["elapsed_s"] for r in records]
        times = [b - a for a, b in zip([0.0] + elapsed[:-1], elapsed)]
    return times[args.warmup:]


def median_step(path):
    return statistics.median(step_times(load(path)))


def goal(ok):
    return "goal met" if ok else "goal missed"


def expert_seconds(path):
    """Experts + ExpertsGrad seconds in a --profile table (or their forms that
    keep the up projections, ...WithHidden)."""
    total = 0.0
    with open(path) as f:
        for line in f:
            m = re.match(r"\s+(Experts|ExpertsGrad)(?:WithHidden)?\s+([0-9.]+) s",
                         line)
            if m:
                total += float(m.group(2))
    if total <= 0:
        sys.exit(f"{path}: no Experts or ExpertsGrad line in the profile")
    return total


if args.compare:
    bf16, fp8, peer = (median_step(p) for p in args.compare)
    print(f"{'bf16 vs PyTorch':28} {peer / bf16:.2f}x  moe-run "
          f"{bf16 * 1e3:.1f} ms, PyTorch {peer * 1e3:.1f} ms a step "
          f"({goal(bf16 <= peer)}: at least as fast)")
    print(f"{'fp8 vs bf16 step':28} {bf16 / fp8:.2f}x  {fp8 * 1e3:.1f} ms "
          f"vs {bf16 * 1e3:.1f} ms")
    if args.profiles:
        b, f = (expert_seconds(p) for p in args.profiles)
        print(f"{'fp8 vs bf16 experts':28} {b / f:.2f}x  Experts+ExpertsGrad "
              f"{f:.3f} s vs {b:.3f} s ({goal(b / f >= args.fp8_goal)}: "
              f">= {args.fp8_goal:g}x)")
    sys.exit(0)

if not args.metrics or not args.peak:
    parser.error("give a metrics file and --peak, or --compare")
records = load(args.metrics)
times = step_times(records)
flops = statistics.median(r["flops_per_s"] for r in records[args.warmup:])
line = (f"median step {statistics.median(times) * 1e3:.1f} ms, "
        f"{flops / 1e12:.1f} TFLOP/s, MFU {flops / args.peak:.1%} of "
        f"{args.peak / 1e12:.0f}")
if args.measured > 0:
    line += f", {flops / args.measured:.1%} of the measured {args.measured / 1e12:.0f}"
print(line + f" ({goal(flops / args.peak >= args.mfu_goal)}: "
      f"{args.mfu_goal:.0%})")
