#!/usr/bin/python3
"""Regenerates tests/data/io/: small .npy files written by NumPy itself and a
.safetensors file written by hand (torch 1.13 has no safetensors package), so
tests/test_io.c can check attn reads what other tools write.

Values follow simple formulas (element i of the C-order flattening) that
test_io.c recomputes on its own; nothing here comes from attn.

Run with Debian's python (it has numpy): /usr/bin/python3 scripts/gen_io_fixtures.py
"""
import json
import os
import struct

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "io")


def save(name, arr, version=None):
    path = os.path.join(OUT, name)
    if version is None:
        np.save(path, arr)  # numpy picks the version (1.0 here)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)


def npy_fixtures():
    # f4: element i = i * 0.25 - 0.5
    save("f4_2x3.npy", (np.arange(6, dtype=np.float32) * 0.25 - 0.5).reshape(2, 3))
    # f8: element i = i + 0.1 (not representable in float32: tests the rounding)
    save("f8_3x2.npy", (np.arange(6, dtype=np.float64) + 0.1).reshape(3, 2))
    # bool: element i = (i % 3 == 0)
    save("b1_7.npy", np.arange(7) % 3 == 0)
    # Fortran order: logical element (C order) i = i, float32 and float64
    save("fortran_f4_2x3x4.npy", np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4)))
    save("fortran_f8_3x5.npy", np.asfortranarray(np.arange(15, dtype=np.float64).reshape(3, 5) + 0.1))
    save("fortran_b1_2x3.npy", np.asfortranarray((np.arange(6) % 2 == 1).reshape(2, 3)))
    # Format versions 2.0 and 3.0: element i = i - 1.5
    save("v2_f4_4.npy", np.arange(4, dtype=np.float32) - 1.5, version=(2, 0))
    save("v3_f4_4.npy", np.arange(4, dtype=np.float32) - 1.5, version=(3, 0))
    # 0-d and empty arrays
    save("scalar_f4.npy", np.array(3.5, dtype=np.float32))
    save("empty_f4_0x3.npy", np.zeros((0, 3), dtype=np.float32))


def safetensors_fixture():
    """mixed.safetensors: one tensor per dtype attn reads, the JSON written in
    a different order from the data (attn returns data order), with metadata."""
    f32 = (np.arange(6, dtype=np.float32) * 0.5).reshape(2, 3)            # i * 0.5
    f64 = np.array([0.1, -2.5, 1e300], dtype=np.float64)                  # 1e300 -> inf in float32
    f16 = np.array([1.0, -2.0, 65504.0, 2.0**-24, 2.0**-14, np.inf, -0.0, np.nan],
                   dtype=np.float16)
    bf16_values = np.array([1.0, -3.5, 2.0**-130, -np.inf], dtype=np.float32)
    bf16 = (bf16_values.view(np.uint32) >> 16).astype("<u2")               # exact: low halves are 0
    assert np.all((bf16_values.view(np.uint32) & 0xFFFF) == 0)
    mask = np.array([[1, 0], [0, 1]], dtype=np.uint8)
    # Data order: f32, f64, f16, bf16, mask.
    blobs = [("weight", "F32", f32.shape, f32.astype("<f4").tobytes()),
             ("double", "F64", f64.shape, f64.astype("<f8").tobytes()),
             ("half", "F16", f16.shape, f16.astype("<f2").tobytes()),
             ("bhalf", "BF16", bf16.shape, bf16.tobytes()),
             ("mask", "BOOL", mask.shape, mask.tobytes())]
    header = {"__metadata__": {"format": "pt", "note": "attn test fixture"}}
    offset = 0
    entries = {}
    for name, dtype, shape, data in blobs:
        entries[name] = {"dtype": dtype, "shape": list(shape),
                         "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    for name in ["mask", "half", "weight", "bhalf", "double"]:  # JSON order != data order
        header[name] = entries[name]
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(os.path.join(OUT, "mixed.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in blobs:
            f.write(data)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    npy_fixtures()
    safetensors_fixture()
    print("wrote", sorted(os.listdir(OUT)))
