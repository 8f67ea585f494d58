#!/usr/bin/env python3
"""Checks moe-run's TensorBoard event files against its metrics file with
TensorBoard's own reader (EventAccumulator): every tag of --tags holds, at
every step of the metrics file that has it, that step's value rounded to
float32, and nothing else. Prints the event files and what matched; exits 1 on a
mismatch."""
import argparse
import json
import os
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

parser = argparse.ArgumentParser()
parser.add_argument("dir")
parser.add_argument("metrics")
parser.add_argument("--tags", default="loss,grad_norm,lr,tokens_per_s,flops_per_s,ce_loss,aux_loss")
args = parser.parse_args()

files = sorted(f for f in os.listdir(args.dir) if f.startswith("events.out.tfevents."))
print(f"{len(files)} event file(s)")
with open(args.metrics) as f:
    records = [json.loads(line) for line in f if line.strip()]
accumulator = EventAccumulator(args.dir, size_guidance={"scalars": 0})
accumulator.Reload()
tags = args.tags.split(",")
missing = [t for t in tags if t not in accumulator.Tags()["scalars"]]
if missing:
    sys.exit(f"tags missing from the event files: {missing}")


def f32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


for tag in tags:
    events = {e.step: e.value for e in accumulator.Scalars(tag)}
    # A tag not in every record (eval_loss) only at the steps that have it.
    expected = {r["step"]: f32(r[tag]) for r in records if tag in r}
    if events != expected:
        sys.exit(f"{tag}: event files hold {events}, the metrics file {expected}")
print(f"{len(tags)} scalars at {len(records)} steps match the metrics file")
