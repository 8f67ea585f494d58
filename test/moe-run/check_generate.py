#!/usr/bin/env python3
"""Checks of moe-run generate's output (test/moe-run/generate.test).

  same-loss METRICS OUT [--rtol R]: the teacher-forced loss generate printed
      for a prompt equals the last eval_loss of a training run's metrics,
      whose evaluation read the same window with the same weights.
  lower GENERATED OUT... RANDOM: each GENERATED output's teacher-forced
      loss is below RANDOM's by at least --margin nats.
  window DATASET N OUT: the first N uint16 ids of a flat token file.
  random-tail PROMPT_FILE N FROM OUT: PROMPT_FILE's ids, then N ids drawn
      uniformly (seeded) from those occurring in the flat file FROM.
"""
import argparse
import json
import random
import re
import struct
import sys


def teacher_forced(path):
    text = open(path).read()
    m = re.search(r"teacher-forced loss ([0-9.eE+-]+)", text)
    if not m:
        sys.exit(f"{path}: no teacher-forced loss in:\n{text}")
    return float(m.group(1))


def ids(path):
    data = open(path, "rb").read()
    return list(struct.unpack(f"<{len(data) // 2}H", data))


def write(path, values):
    open(path, "wb").write(struct.pack(f"<{len(values)}H", *values))


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    same = sub.add_parser("same-loss")
    same.add_argument("metrics")
    same.add_argument("out")
    same.add_argument("--rtol", type=float, default=1e-5)
    lower = sub.add_parser("lower")
    lower.add_argument("generated", nargs="+")
    lower.add_argument("--random", required=True)
    lower.add_argument("--margin", type=float, default=1.0)
    window = sub.add_parser("window")
    window.add_argument("dataset")
    window.add_argument("n", type=int)
    window.add_argument("out")
    tail = sub.add_parser("random-tail")
    tail.add_argument("prompt")
    tail.add_argument("n", type=int)
    tail.add_argument("source")
    tail.add_argument("out")
    args = parser.parse_args()

    if args.command == "same-loss":
        with open(args.metrics) as f:
            evals = [json.loads(l)["eval_loss"] for l in f
                     if "eval_loss" in json.loads(l)]
        if not evals:
            sys.exit(f"{args.metrics}: no eval_loss")
        a, b = evals[-1], teacher_forced(args.out)
        diff = abs(a - b) / max(abs(a), abs(b))
        print(f"eval_loss {a:.7g}, decoder {b:.7g}: relative difference "
              f"{diff:.2g}")
        if diff > args.rtol:
            sys.exit(f"differ by more than {args.rtol:g}")
    elif args.command == "lower":
        baseline = teacher_forced(args.random)
        for path in args.generated:
            loss = teacher_forced(path)
            print(f"generated {loss:.4f} nats/token vs random {baseline:.4f}")
            if loss + args.margin > baseline:
                sys.exit(f"{path}: not {args.margin} nats below random")
        print(f"every generated text is at least {args.margin} nats/token "
              "below random")
    elif args.command == "window":
        write(args.out, ids(args.dataset)[: args.n])
    else:
        alphabet = sorted(set(ids(args.source)))
        draw = random.Random(0)
        write(args.out, ids(args.prompt) +
              [draw.choice(alphabet) for _ in range(args.n)])


main()
