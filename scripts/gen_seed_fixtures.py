#!/usr/bin/python3
"""Regenerates the seed documents' worked-example fixtures in examples/.

numpy_seed42.safetensors   W_Q, W_K, W_V exactly as the NumPy example draws them
                           (np.random.seed(42); three randn(3, 3) in that order),
                           stored as F64 so the fixture holds numpy's exact draws.
pytorch_mha_seed42.safetensors
                           the state_dict of torch.manual_seed(42);
                           nn.MultiheadAttention(3, 1, batch_first=True).
Needs Debian's python3-numpy and python3-torch (run with /usr/bin/python3).
"""
import json
import os
import struct
import sys

import numpy as np


def write_safetensors(path, tensors, dtype="F32"):
    """Minimal safetensors writer: header JSON, offsets in insertion order."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype={"F32": "<f4", "F64": "<f8"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    np.random.seed(42)
    d = 3
    w = {name: np.random.randn(d, d) for name in ("W_Q", "W_K", "W_V")}
    write_safetensors(os.path.join(out, "numpy_seed42.safetensors"), w, "F64")

    import torch
    import torch.nn as nn
    torch.manual_seed(42)
    layer = nn.MultiheadAttention(embed_dim=3, num_heads=1, batch_first=True)
    sd = {k: v.detach().numpy() for k, v in layer.state_dict().items()}
    write_safetensors(os.path.join(out, "pytorch_mha_seed42.safetensors"), sd)
    x = torch.tensor([[1.0, 2.0, 3.0], [3.0, 3.0, 2.0]]).unsqueeze(0)
    y, a = layer(x, x, x)
    print("torch", torch.__version__, "A =", a.squeeze(0).detach().numpy().tolist(),
          "Y =", y.squeeze(0).detach().numpy().tolist(), file=sys.stderr)


if __name__ == "__main__":
    main()
