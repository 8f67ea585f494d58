#!/usr/bin/env python3
"""Exits 0 iff two moe-run metrics files ("-" for stdin) hold bitwise the
same training values (loss, cross-entropy, aux loss, grad norm, lr) at every
step; timings are ignored."""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("a")
parser.add_argument("b")
parser.add_argument("--keys", default="step,loss,ce_loss,aux_loss,grad_norm,lr")
args = parser.parse_args()
KEYS = args.keys.split(",")


def load(path):
    f = sys.stdin if path == "-" else open(path)
    return [{k: r.get(k) for k in KEYS} for r in map(json.loads, f)]


a, b = load(args.a), load(args.b)
if len(a) != len(b):
    sys.exit(f"{len(a)} steps vs {len(b)} steps")
for ra, rb in zip(a, b):
    if ra != rb:
        sys.exit(f"runs differ at step {ra['step']}: {ra} vs {rb}")
print(f"identical over {len(a)} steps")
