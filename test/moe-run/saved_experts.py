#!/usr/bin/env python3
"""Compiles a model twice per flavour (moec flags), keeping the experts' up
projections and with --recompute-experts, trains both for a few steps and
prints, per flavour, the largest relative difference of their training
values (compare_losses.py's keys); exits 1 if a flavour's runs differ at
all, or a tool fails."""
import argparse
import json
import shlex
import subprocess
import sys

KEYS = ["loss", "ce_loss", "aux_loss", "grad_norm", "lr"]

parser = argparse.ArgumentParser()
parser.add_argument("--moec", required=True)
parser.add_argument("--moe-run", required=True)
parser.add_argument("--data", required=True)
parser.add_argument("--dir", required=True)
parser.add_argument("--model", required=True)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("flavours", nargs="+", help="NAME=MOEC FLAGS")
args = parser.parse_args()


def train(name, flags):
    artifact = f"{args.dir}/{name}.moebin"
    metrics = f"{args.dir}/{name}.jsonl"
    subprocess.run([args.moec, args.model, "-o", artifact] + flags, check=True)
    subprocess.run([args.moe_run, artifact, "--data", args.data, "--steps",
                    str(args.steps), "--threads", "1", "--metrics", metrics,
                    "--quiet"], check=True)
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()]


failed = False
for flavour in args.flavours:
    name, _, text = flavour.partition("=")
    flags = shlex.split(text)
    kept = train(f"{name}-kept", flags)
    recomputed = train(f"{name}-recomputed", flags + ["--recompute-experts"])
    if len(kept) != args.steps or len(recomputed) != args.steps:
        sys.exit(f"{name}: {len(kept)} and {len(recomputed)} steps, expected "
                 f"{args.steps}")
    worst = 0.0
    for a, b in zip(kept, recomputed):
        for key in KEYS:
            if key in a or key in b:
                x, y = a[key], b[key]
                worst = max(worst, 0.0 if x == y else
                            abs(x - y) / max(abs(x), abs(y), 1e-30))
    failed = failed or worst > 0
    print(f"{name}: kept vs recomputed within {worst:g} over {args.steps} steps")
sys.exit(1 if failed else 0)
