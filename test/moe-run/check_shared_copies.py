"""Checks that every tensor two checkpoint shards both hold is bitwise equal.

Usage: check_shared_copies.py STEP_DIR NAME...

A parameter two pipeline stages share (tied embeddings) is held, with its
AdamW moments, by the rank of each stage; both ranks apply the same
update, so their copies in the checkpoint must be the same bits. Prints
one line per NAME, and fails when a NAME is held by fewer than two shards
or the copies differ.
"""

import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
import safetensors_io  # noqa: E402


def main():
    step_dir, names = sys.argv[1], sys.argv[2:]
    shards = sorted(glob.glob(os.path.join(step_dir, "rank-*.safetensors")))
    tensors = [(os.path.basename(path), safetensors_io.load(path)) for path in shards]
    failed = False
    for name in names:
        copies = [(shard, values[name]) for shard, values in tensors if name in values]
        if len(copies) < 2:
            print(f"{name}: held by {len(copies)} shard(s), expected 2")
            failed = True
            continue
        first_shard, first = copies[0]
        differ = [shard for shard, other in copies[1:]
                  if other.shape != first.shape or
                  not np.array_equal(other.view(np.uint32), first.view(np.uint32))]
        if differ:
            print(f"{name}: {first_shard} and {', '.join(differ)} differ")
            failed = True
        else:
            print(f"{name}: {len(copies)} copies, bitwise equal")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
