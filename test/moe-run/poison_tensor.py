#!/usr/bin/env python3
"""Writes a non-finite value into one F32 tensor of a safetensors file.

  poison_tensor.py FILE TENSOR INDEX VALUE     (VALUE: nan, inf or -inf)

Element INDEX (flat, row-major) of TENSOR becomes VALUE, in place; nothing
else in the file changes.
"""
import json
import struct
import sys


def main(path, tensor, index, value):
    with open(path, "r+b") as f:
        (header_size,) = struct.unpack("<Q", f.read(8))
        entry = json.loads(f.read(header_size))[tensor]
        assert entry["dtype"] == "F32", entry["dtype"]
        begin, end = entry["data_offsets"]
        assert 0 <= 4 * index < end - begin, (index, begin, end)
        f.seek(8 + header_size + begin + 4 * index)
        f.write(struct.pack("<f", float(value)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
