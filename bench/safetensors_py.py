"""A tiny safetensors reader/writer on torch alone (no `safetensors` package).

File layout: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the raw little-endian tensor data (offsets are relative to the end of the header).

    from safetensors_py import load, save
    tensors, metadata = load("model.safetensors")          # {name: torch.Tensor}, {str: str}
    save("grads.safetensors", {"w": t}, {"format": "pt"})  # tensors written in their own dtype
"""
import json
import struct
import sys

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}

assert sys.byteorder == "little", "safetensors_py assumes a little-endian host"


def load(path):
    """All tensors of one file as {name: tensor} (CPU, own memory, the file's dtype) and its metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None) or {}
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, e in header.items():
        if e["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {e['dtype']}")
        dt = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        shape = list(e["shape"])
        numel = 1
        for s in shape:
            numel *= s
        esize = torch.empty((), dtype=dt).element_size()
        if end - b != numel * esize or end > len(data) or b < 0:
            raise ValueError(f"{path}: tensor {name}: data_offsets {b}..{end} do not hold {shape} {e['dtype']}")
        if numel == 0:
            out[name] = torch.empty(shape, dtype=dt)
            continue
        t = torch.frombuffer(bytearray(data[b:end]), dtype=dt)  # bytearray: writable, owned copy
        out[name] = t.reshape(shape)
    return out, meta


def save(path, tensors, metadata=None):
    """Write {name: tensor} (any dtype in DTYPES) with 8-byte-aligned data, names sorted."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        if t.dtype not in NAMES:
            raise ValueError(f"tensor {name}: dtype {t.dtype} not supported")
        # bytes through a uint8 view (works for bf16, which numpy lacks)
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
