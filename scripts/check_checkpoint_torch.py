#!/usr/bin/env python3
"""Load an `attn train` checkpoint's MHA into torch.nn.MultiheadAttention and
show that PyTorch and attn compute the same outputs.

    /usr/bin/python3 scripts/check_checkpoint_torch.py CKPT.safetensors [--attn build/attn]

What it does:
  1. reads the checkpoint (safetensors, parsed here with numpy: no extra
     package needed) and loads the tensors under "mha." into
     nn.MultiheadAttention(E, H, batch_first=True) with load_state_dict(strict=True):
     the names and shapes are torch's own;
  2. loads the whole model (embedding.weight, mha.*, head.*) into the
     equivalent torch module, strict as well;
  3. builds inputs the way the trained model sees them (token embeddings +
     sinusoidal positions of a random recall-style layout) and plain N(0,1)
     inputs, runs `attn mha` on them (self-attention over all positions, with
     per-head weights) and torch's MHA on the same arrays, and prints the
     largest differences of outputs and attention weights;
  4. exits 1 if any difference is above float32 rounding (rel. 1e-5).

Needs torch and numpy (Debian's /usr/bin/python3 here has both).
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BOOL": np.bool_}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(data[base + start : base + end], dtype=DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def positional_encoding(n, e):
    """Vaswani et al.: PE[p, 2i] = sin(p / 10000^(2i/E)), PE[p, 2i+1] = cos(...)."""
    pe = np.zeros((n, e))
    for p in range(n):
        for c in range(e):
            a = p / 10000 ** ((c - c % 2) / e)
            pe[p, c] = math.sin(a) if c % 2 == 0 else math.cos(a)
    return pe.astype(np.float32)


class Model(torch.nn.Module):
    """The model attn train builds, in torch: same submodule names."""

    def __init__(self, vocab, embed_dim, heads, classes):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, embed_dim)
        self.mha = torch.nn.MultiheadAttention(embed_dim, heads, batch_first=True)
        self.head = torch.nn.Linear(embed_dim, classes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--attn", default=os.path.join(os.path.dirname(__file__), "..", "build", "attn"))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    sd = read_safetensors(args.checkpoint)
    cfg = {k[len("config."):]: int(v.reshape(-1)[0]) for k, v in sd.items() if k.startswith("config.")}
    if cfg.get("unscaled"):
        sys.exit("this checkpoint was trained without 1/sqrt(d_k): nn.MultiheadAttention cannot express it")
    heads = cfg["num_heads"]
    vocab, embed_dim = sd["embedding.weight"].shape
    classes = sd["head.weight"].shape[0]
    pairs = cfg["num_pairs"]
    seq = pairs + (2 if cfg["task"] == 1 else 1)
    print(f"{args.checkpoint}: embed_dim {embed_dim}, {heads} heads, vocabulary {vocab}, "
          f"{classes} classes, sequence {seq}")

    # 1. The MHA alone, from the "mha." tensors, strict.
    mha_sd = {k[len("mha."):]: torch.from_numpy(v) for k, v in sd.items() if k.startswith("mha.")}
    mha = torch.nn.MultiheadAttention(embed_dim, heads, batch_first=True)
    mha.load_state_dict(mha_sd, strict=True)
    print(f"nn.MultiheadAttention.load_state_dict(strict=True): {sorted(mha_sd)}")
    # 2. The whole model, strict (the config.* scalars are not parameters).
    model = Model(vocab, embed_dim, heads, classes)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items() if not k.startswith("config.")},
                          strict=True)
    print("whole model (embedding, mha, head).load_state_dict(strict=True): ok")

    # 3. Inputs: a recall-style layout embedded like the model does, and N(0,1).
    rng = np.random.default_rng(args.seed)
    keys, values = cfg["num_keys"], cfg["num_values"]
    emb = sd["embedding.weight"]
    x_task = np.zeros((args.batch, seq, embed_dim), np.float32)
    for b in range(args.batch):
        ks = rng.choice(keys, size=pairs, replace=False)
        for p in range(pairs):
            x_task[b, p] = emb[ks[p]] + emb[keys + rng.integers(values)]
        if cfg["task"] == 1:
            x_task[b, seq - 2] = emb[keys + rng.integers(values)]
        x_task[b, seq - 1] = emb[ks[rng.integers(pairs)]]
    if cfg["positional_encoding"]:
        x_task += positional_encoding(seq, embed_dim)
    x_rand = rng.standard_normal((args.batch, seq, embed_dim)).astype(np.float32)

    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        params = os.path.join(tmp, "mha.safetensors")
        write_safetensors(params, {k: v.numpy() for k, v in mha_sd.items()})
        for label, x in (("embedded task input", x_task), ("N(0,1) input", x_rand)):
            xp, yp, wp = (os.path.join(tmp, n) for n in ("x.npy", "y.npy", "w.npy"))
            np.save(xp, x)
            subprocess.run([args.attn, "mha", "--params", params, "--num-heads", str(heads),
                            "--query", xp, "--out", yp, "--attn-weights", wp, "--per-head"], check=True)
            y_attn, w_attn = np.load(yp), np.load(wp)
            with torch.no_grad():
                xt = torch.from_numpy(x)
                y_torch, w_torch = mha(xt, xt, xt, need_weights=True, average_attn_weights=False)
            y_torch, w_torch = y_torch.numpy(), w_torch.numpy()
            dy = np.abs(y_attn - y_torch).max()
            dw = np.abs(w_attn - w_torch).max()
            rel = dy / max(np.abs(y_torch).max(), 1e-30)
            worst = max(worst, rel, dw)
            print(f"{label}: x {x.shape}; max |y_attn - y_torch| = {dy:.3g} (relative {rel:.3g}), "
                  f"max |weights_attn - weights_torch| = {dw:.3g}")
            q = seq - 1
            print(f"  query-position output, first 4 features: attn {np.round(y_attn[0, q, :4], 6)}"
                  f"  torch {np.round(y_torch[0, q, :4], 6)}")
    ok = worst <= 1e-5
    print("identical to float32 rounding" if ok else "MISMATCH beyond float32 rounding")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
