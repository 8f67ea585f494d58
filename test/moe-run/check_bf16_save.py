#!/usr/bin/env python3
"""Exits 0 iff safetensors file B (moe-run --save-dtype bf16) holds exactly
the tensors of file A (--save-dtype fp32) rounded to nearest even into BF16,
the same names and shapes, every tensor of B being BF16."""
import json
import struct
import sys

import numpy as np


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        dtype = {"F32": np.uint32, "BF16": np.uint16}[t["dtype"]]
        out[name] = (t["dtype"], t["shape"], np.frombuffer(body[begin:end], dtype))
    return out


def rne(bits):
    # fp32 bits -> bf16 bits, round to nearest even (the values are finite).
    bits = bits.astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


a, b = read(sys.argv[1]), read(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit(f"tensor names differ: {sorted(set(a) ^ set(b))}")
for name, (dtype, shape, bits) in a.items():
    bdtype, bshape, bbits = b[name]
    if dtype != "F32" or bdtype != "BF16" or shape != bshape:
        sys.exit(f"{name}: {dtype}{shape} vs {bdtype}{bshape}")
    if not np.array_equal(rne(bits), bbits):
        sys.exit(f"{name}: the bf16 tensor is not the fp32 one rounded to nearest even")
print(f"{len(a)} tensors: bf16 = RNE(fp32)")
