#!/usr/bin/env python3
"""Splits one .safetensors file into an HF sharded checkpoint.

  shard_checkpoint.py FILE DIR

DIR gets model-00001-of-00002.safetensors and model-00002-of-00002.safetensors
(the tensors alternately) and model.safetensors.index.json, as
save_pretrained writes them (test/moe-run/hostile-flags.test).
"""
import json
import os
import struct
import sys


def read(path):
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    header.pop("__metadata__", None)
    return {name: (info["dtype"], info["shape"],
                   body[info["data_offsets"][0]:info["data_offsets"][1]])
            for name, info in header.items()}


def write(path, tensors):
    header, offset, chunks = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        chunks.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def main():
    source, out = sys.argv[1:3]
    os.makedirs(out, exist_ok=True)
    tensors = read(source)
    names = ["model-00001-of-00002.safetensors",
             "model-00002-of-00002.safetensors"]
    shards = [{}, {}]
    weight_map = {}
    for i, (name, tensor) in enumerate(sorted(tensors.items())):
        shards[i % 2][name] = tensor
        weight_map[name] = names[i % 2]
    for name, shard in zip(names, shards):
        write(os.path.join(out, name), shard)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
