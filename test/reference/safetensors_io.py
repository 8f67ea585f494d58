"""Minimal safetensors reader/writer using only numpy (no `safetensors` package).

File layout (https://github.com/huggingface/safetensors):

    [8 bytes]  N, little-endian unsigned 64-bit: length of the JSON header
    [N bytes]  UTF-8 JSON object: {"<name>": {"dtype": "F32", "shape": [..],
               "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
               (writers may pad it with trailing spaces to an 8-byte boundary)
    [rest]     the data buffer; offsets are relative to its start, [begin, end),
               little-endian, row-major (C order)

Supported dtypes: F64, F32, F16, BF16 (read only: returned widened to float32),
I64, I32, I16, I8, U8, BOOL.
"""

import json
import struct

import numpy as np

# safetensors dtype string -> little-endian numpy dtype.
_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_NP_TO_ST = {v: k for k, v in _DTYPES.items()}

# Refuse absurd headers rather than trying to allocate them (the reference
# implementation uses the same 100 MB limit).
_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    pass


def _bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of an IEEE float32: widen by shifting left 16 bits."""
    return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)


def read_header(path):
    """Return (header_dict, data_start_offset) without reading tensor data."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) != 8:
            raise SafetensorsError(f"{path}: file shorter than 8 bytes")
        (n,) = struct.unpack("<Q", prefix)
        if n > _MAX_HEADER:
            raise SafetensorsError(f"{path}: header length {n} too large")
        raw = f.read(n)
        if len(raw) != n:
            raise SafetensorsError(f"{path}: truncated header")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: bad JSON header: {e}") from e
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    return header, 8 + n


def load(path, with_metadata=False):
    """Read every tensor of a .safetensors file into a dict name -> numpy array.

    BF16 tensors are returned as float32 (exact widening). With
    with_metadata=True returns (tensors, metadata_dict_or_empty).
    """
    header, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        buf = f.read()
    metadata = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        try:
            dt, shape, (b, e) = info["dtype"], list(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise SafetensorsError(f"{path}: malformed entry for {name!r}: {info!r}") from exc
        if not (0 <= b <= e <= len(buf)):
            raise SafetensorsError(f"{path}: {name}: data_offsets [{b},{e}) outside buffer of {len(buf)} bytes")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if dt == "BF16":
            itemsize = 2
        elif dt in _DTYPES:
            itemsize = _DTYPES[dt].itemsize
        else:
            raise SafetensorsError(f"{path}: {name}: unsupported dtype {dt}")
        if e - b != count * itemsize:
            raise SafetensorsError(
                f"{path}: {name}: {e - b} bytes for shape {shape} of {dt} (expected {count * itemsize})")
        if dt == "BF16":
            arr = _bf16_to_f32(np.frombuffer(buf, dtype="<u2", count=count, offset=b))
        else:
            arr = np.frombuffer(buf, dtype=_DTYPES[dt], count=count, offset=b).copy()
        out[name] = arr.reshape(shape)
    return (out, metadata) if with_metadata else out


def save(tensors, path, metadata=None):
    """Write dict name -> numpy array (F64/F32/F16/I64/I32/I16/I8/U8/BOOL).

    Tensors are laid out in sorted-name order; the header is space-padded so
    the data buffer starts on an 8-byte boundary.
    """
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, offset = [], 0
    for name in sorted(tensors):
        if name == "__metadata__":
            raise SafetensorsError("'__metadata__' is reserved")
        arr = np.asarray(tensors[name])
        le = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
        st = _NP_TO_ST.get(np.dtype(le))
        if st is None:
            raise SafetensorsError(f"{name}: cannot write numpy dtype {arr.dtype}")
        data = np.ascontiguousarray(arr, dtype=_DTYPES[st]).tobytes()
        header[name] = {"dtype": st, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((-len(raw)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data in blobs:
            f.write(data)
