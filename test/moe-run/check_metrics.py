#!/usr/bin/env python3
"""Checks a moe-run metrics file: one finite record per step, in order and
numbered from 1 (as the progress lines number them), and
a loss that fell by at least --min-drop (relative, first step vs the mean of
the last ten steps, so one noisy batch cannot decide it)."""
import argparse
import json
import math
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("metrics")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--min-drop", type=float, required=True)
    args = parser.parse_args()
    with open(args.metrics) as f:
        records = [json.loads(line) for line in f]
    if len(records) != args.steps:
        sys.exit(f"expected {args.steps} records, got {len(records)}")
    for i, r in enumerate(records):
        if r["step"] != i + 1:
            sys.exit(f"record {i} has step {r['step']}, expected {i + 1}")
        for key in ("loss", "grad_norm", "lr", "tokens_per_s", "flops_per_s"):
            if r.get(key) is None or not math.isfinite(r[key]):
                sys.exit(f"step {i + 1}: {key} is {r.get(key)}")
    first = records[0]["loss"]
    last = sum(r["loss"] for r in records[-10:]) / min(10, len(records))
    drop = (first - last) / first
    print(f"loss {first:.4f} -> {last:.4f}: drop {drop:.1%}")
    if drop < args.min_drop:
        sys.exit(f"loss dropped by {drop:.1%}, expected at least {args.min_drop:.0%}")


if __name__ == "__main__":
    main()
