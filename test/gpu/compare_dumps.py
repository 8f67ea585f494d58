#!/usr/bin/env python3
"""Compares a GPU's step dump (moe-run --dump-step) with the CPU's: every
gradient (grads.safetensors) and every updated weight
(params_after.safetensors), tensor by tensor, by the relative norm of the
difference ||gpu - cpu|| / ||cpu||. Exits 0 iff every tensor is within
--rtol and neither dump misses a tensor the other has.

The bound, 2e-2 by default: both backends run the same BF16 recipe
(docs/precision.md), so what differs is the order of the fp32 sums inside
GEMMs and reductions, which flips a BF16 rounding by one ulp (2^-8) where a
value lies near a midpoint; a gradient passes through a few such roundings
per layer on its way back, and a few ulps of 2^-8 in norm is about 1e-2.
The updated weights differ far less (AdamW's first update is lr-sized), so
they meet the bound with room.

The tensors a router's choice feeds (--routed: the MoE blocks' weights and
the norm before them) are held to --routed-rtol, 1e-1, instead: where two
experts' router logits nearly tie, that last-ulp difference upstream sends
a token to the other expert on one backend (the conformance suite excepts
the same near-ties, docs/cuda.md). Moving one token of the ~T*k/E an expert
gets moves that expert's gradient by about 1/sqrt(T*k/E) of its norm: 6%
for the tiny model's 256 (a step of the virtual GPU, run.sh --rehearse,
moves one expert of the tiny model's layer 1 by 5.5%). 1e-1 allows a token
or two; a wrong kernel is off by far more.

Numpy only: it runs where PyTorch is not wanted (the lent GPU machine has
numpy)."""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "reference"))
import safetensors_io  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("reference", help="the CPU's dump directory")
parser.add_argument("run", help="the GPU's dump directory")
parser.add_argument("--rtol", type=float, default=2e-2)
parser.add_argument("--routed", default=r"block_sparse_moe\.|post_attention_layernorm",
                    help="a regular expression: the tensors a router's choice feeds")
parser.add_argument("--routed-rtol", type=float, default=1e-1)
args = parser.parse_args()
routed = re.compile(args.routed)


def bound(name):
    return args.routed_rtol if routed.search(name) else args.rtol


def compare(file):
    ref = safetensors_io.load(os.path.join(args.reference, file))
    run = safetensors_io.load(os.path.join(args.run, file))
    if set(ref) != set(run):
        only = sorted(set(ref) ^ set(run))
        sys.exit(f"{file}: the dumps hold different tensors: {only[:5]}")
    rows = []
    for name in sorted(ref):
        a = np.asarray(ref[name], dtype=np.float64)
        b = np.asarray(run[name], dtype=np.float64)
        if a.shape != b.shape:
            sys.exit(f"{file}: {name}: shape {list(b.shape)}, the CPU's "
                     f"{list(a.shape)}")
        if not np.all(np.isfinite(b)):
            sys.exit(f"{file}: {name}: not finite on the GPU")
        norm = np.linalg.norm(a)
        diff = np.linalg.norm(b - a)
        rows.append((diff / norm if norm > 0 else diff, name))
    return rows


def metrics(path):
    with open(os.path.join(path, "metrics.json")) as f:
        return json.load(f)


failed = False
summary = []
for file in ("grads.safetensors", "params_after.safetensors"):
    rows = compare(file)
    worst = max(rows)
    over = [r for r in rows if not r[0] <= bound(r[1])]
    for rel, name in sorted(rows, reverse=True)[:5]:
        print(f"{file}: {name}: {rel:.2e}")
    for rel, name in over:
        print(f"{file}: {name}: {rel:.2e} exceeds {bound(name):g}")
    failed |= bool(over)
    worst_other = max((r for r in rows if not routed.search(r[1])),
                      default=(0.0, ""))
    summary.append(f"{file.split('.')[0]} worst {worst[0]:.1e}, not routed "
                   f"{worst_other[0]:.1e} ({len(rows)} tensors)")
ref, run = metrics(args.reference), metrics(args.run)
loss = abs(run["loss"] - ref["loss"]) / abs(ref["loss"])
summary.append(f"loss {loss:.1e}")
failed |= not loss <= args.rtol
print(("FAIL: " if failed else "") + ", ".join(summary) +
      f" (bound {args.rtol:g}, routed {args.routed_rtol:g})")
sys.exit(1 if failed else 0)
