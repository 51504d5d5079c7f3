#!/usr/bin/env python3
"""tests/fixtures/byteorder: little-endian files written by NumPy (not by attn),
which tests/test_byteorder.c reads and compares attn's own output with, byte
for byte, on every host (x86-64, aarch64 and big-endian s390x under qemu).
Run with /usr/bin/python3 (NumPy) from the repository root."""
import json
import struct

import numpy as np

OUT = "tests/fixtures/byteorder"
# The values test_byteorder.c holds: each float32 byte differs from its mirror.
VALUES = [1.0, -2.5, 3.1415927, 1e-3, -65504.0, 2.0**-20, 12345.678, 0.0]

f4 = np.array(VALUES, dtype="<f4").reshape(2, 4)
np.save(f"{OUT}/values_f4.npy", f4)
np.save(f"{OUT}/values_f2.npy", f4.astype("<f2"))


def bf16_bytes(a):
    """bfloat16 by round to nearest even of the float32 bits, little-endian."""
    u = a.astype("<f4").view("<u4").astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    return r.tobytes()


tensors = [("a", "F32", f4.tobytes()), ("b", "F16", f4.astype("<f2").tobytes()),
           ("c", "BF16", bf16_bytes(f4))]
header, offset, data = {}, 0, b""
for name, dtype, raw in tensors:
    header[name] = {"dtype": dtype, "shape": [2, 4], "data_offsets": [offset, offset + len(raw)]}
    offset += len(raw)
    data += raw
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(f"{OUT}/values.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
