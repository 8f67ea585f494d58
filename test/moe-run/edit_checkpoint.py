#!/usr/bin/env python3
"""Edits an HF-layout checkpoint for the loader's tests:

  edit_checkpoint.py shard DIR N           model.safetensors into N shard files
                                           and model.safetensors.index.json
  edit_checkpoint.py drop FILE NAME        without tensor NAME
  edit_checkpoint.py add FILE NAME         with an extra tensor NAME
  edit_checkpoint.py reshape FILE NAME     with NAME's rows cut by one
  edit_checkpoint.py poison FILE NAME      with NAME's element 3 a NaN
  edit_checkpoint.py permuted A B NAME G O R
                                           exits 0 iff tensor NAME of B is A's
                                           with, in each group of G rows, rows
                                           O + i and O + R/2 + i of A at O + 2i
                                           and O + 2i + 1 of B (HF's
                                           interleaved RoPE rows), and differs
  edit_checkpoint.py same A B NAME         exits 0 iff tensor NAME is the same
                                           in A and B, bit for bit
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
import safetensors_io  # noqa: E402


def main(argv):
    command = argv[1]
    if command == "shard":
        root, count = argv[2], int(argv[3])
        path = os.path.join(root, "model.safetensors")
        tensors = safetensors_io.load(path)
        names = sorted(tensors)
        weight_map = {}
        for i in range(count):
            part = names[i::count]
            file = f"model-{i + 1:05d}-of-{count:05d}.safetensors"
            safetensors_io.save({n: tensors[n] for n in part}, os.path.join(root, file),
                                {"format": "pt"})
            weight_map.update({n: file for n in part})
        os.remove(path)
        with open(os.path.join(root, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)
        return 0
    if command == "permuted":
        a, b = safetensors_io.load(argv[2])[argv[4]], safetensors_io.load(argv[3])[argv[4]]
        group, offset, rope = int(argv[5]), int(argv[6]), int(argv[7])
        want = a.reshape(-1, group, a.shape[-1]).copy()
        part = want[:, offset:offset + rope].copy()
        want[:, offset:offset + rope:2] = part[:, :rope // 2]
        want[:, offset + 1:offset + rope:2] = part[:, rope // 2:]
        same = np.array_equal(want.reshape(a.shape), b)
        moved = not np.array_equal(a, b)
        print(f"{argv[4]}: {'permuted' if same and moved else 'NOT permuted'}")
        return 0 if same and moved else 1
    if command == "same":
        a, b = safetensors_io.load(argv[2])[argv[4]], safetensors_io.load(argv[3])[argv[4]]
        same = a.shape == b.shape and np.array_equal(a, b)
        print(f"{argv[4]}: {'same' if same else 'NOT the same'}")
        return 0 if same else 1
    path, name = argv[2], argv[3]
    tensors = safetensors_io.load(path)
    if command == "drop":
        del tensors[name]
    elif command == "add":
        tensors[name] = np.zeros((2, 2), dtype=np.float32)
    elif command == "reshape":
        tensors[name] = tensors[name][:-1]
    elif command == "poison":
        flat = tensors[name].reshape(-1).copy()
        flat[3] = np.nan
        tensors[name] = flat.reshape(tensors[name].shape)
    else:
        sys.exit(__doc__)
    safetensors_io.save(tensors, path, {"format": "pt"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
