#!/usr/bin/python3
"""Regenerates the PyTorch conformance fixtures in tests/fixtures/torch/.

Run with Debian's /usr/bin/python3 (python3-torch 1.13, python3-numpy):

    /usr/bin/python3 scripts/gen_torch_fixtures.py

tests/test_torch_conformance.c runs the `attn` CLI on every case and compares
its outputs with the expectations stored here; the test itself needs no
python.

One directory per case, tests/fixtures/torch/<case>/:

  args                 one line: the CLI options of the case (no file paths),
                       e.g. "--num-heads 2 --causal --add-zero-attn".
  params.safetensors   (MHA only) the module's state_dict, F32. Its presence
                       makes the case an `attn mha` case, else `attn sdpa`.
  query.npy key.npy value.npy key_padding_mask.npy attn_mask.npy grad_out.npy
                       inputs (<f4 float32, |b1 bool); the test passes each one
                       present to the option of the same name.
  out.npy              expected output.
  lse.npy              (SDPA) expected log-sum-exp; present = run with --lse.
  attn_weights.npy     expected weights; present = run with --attn-weights.
  attn_weights_per_head.npy
                       (MHA) same with --attn-weights --per-head.
  grads.safetensors    (MHA, with grad_out.npy) expected `attn mha-backward
                       --grads` file: one tensor per parameter under torch's
                       names plus query (and key, value for cross-attention).
  grad_query.npy grad_key.npy grad_value.npy
                       (SDPA, with grad_out.npy) expected sdpa-backward outputs.

How the expectations are made:
  MHA   torch.nn.MultiheadAttention(batch_first=True), eval mode, converted to
        float64 with .double(). Parameters are drawn in float32 (torch's init
        plus random biases), so the F32 safetensors holds them exactly; inputs
        are float32 values too. Forward, weights and autograd run in float64
        with grad enabled (which keeps torch off its native fast path); results
        are stored as float32. The CLI's --causal is passed to torch as
        attn_mask = triu(ones(L,S), 1) (1.13's MHA has no is_causal), combined
        with any other attn_mask (bool: or; float: -inf filled). Masks are
        drawn so no query row is fully masked, except in the two dead_* cases
        below, whose expectation is set explicitly.
  SDPA  torch 1.13 has no F.scaled_dot_product_attention, so the expectation
        is built from torch ops in float64: scores = q @ k^T * scale + mask,
        softmax, @ v, logsumexp for the LSE, autograd for dQ, dK, dV; GQA by
        repeat_interleave of the K/V heads (so autograd sums dK/dV over a group).
        A query row with no visible key is set to output 0, LSE -inf, weights 0
        and zero gradients (torch would give NaN).

Known torch-version note: torch 1.13 combines a float key_padding_mask with an
attn_mask by masked_fill/logical_or (treating it as boolean); torch >= 2.0 and
attn add it. The one case mixing the two (mha_kpm_float_mask_float2) hands
torch the float sum of both masks as a (B*H,L,S) attn_mask, i.e. torch 2.x
semantics computed with 1.13 ops.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                       "torch")


# ------------------------------------------------------------------ writing

def write_safetensors(path, tensors):
    """Minimal F32 safetensors writer: JSON header padded with spaces to a
    multiple of 8, offsets contiguous from 0 in insertion order."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(arr)),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def f32(x):
    """float32 copy of a tensor/array (as numpy)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


class Case:
    def __init__(self, name):
        self.name = name
        self.dir = os.path.join(OUT_DIR, name)
        os.makedirs(self.dir)

    def npy(self, fname, arr):
        arr = np.asarray(arr)
        if arr.dtype != np.bool_:
            arr = arr.astype(np.float32)
        np.save(os.path.join(self.dir, fname), np.ascontiguousarray(arr))

    def args(self, line):
        with open(os.path.join(self.dir, "args"), "w") as f:
            f.write(line.strip() + "\n")

    def safetensors(self, fname, tensors):
        write_safetensors(os.path.join(self.dir, fname), tensors)


def rounded(rng, shape, scale=1.0):
    """Normal float32 values, returned as float64 (exactly representable)."""
    return rng.standard_normal(shape).astype(np.float32).astype(np.float64) * scale


# ---------------------------------------------------------------------- MHA

def mha_case(name, seed, E, H, L, S=None, B=2, cross=False, kdim=None, vdim=None, bias=True,
             bias_kv=False, zero_attn=False, kpm=None, mask=None, causal=False, weights=None,
             backward=True, dead=None):
    """One nn.MultiheadAttention configuration.

    B=0: unbatched (L,E) input. kpm: None|'bool'|'float'. mask: None|'bool2'|
    'float2'|'bool3'|'float3'. weights: None|'avg'|'head'. dead: None|
    'batch' (every key of batch 1 padded) | 'rows' (causal row 0 of batch 0
    loses its only key)."""
    rng = np.random.RandomState(seed)
    torch.manual_seed(seed)
    S = L if not cross else S
    kdim = kdim or E
    vdim = vdim or E
    assert cross or (kdim == E and vdim == E)
    m = nn.MultiheadAttention(E, H, bias=bias, add_bias_kv=bias_kv, add_zero_attn=zero_attn,
                              kdim=kdim if cross else None, vdim=vdim if cross else None,
                              batch_first=True)
    m.eval()
    with torch.no_grad():  # random biases too (torch initialises them to 0)
        for pname, p in m.named_parameters():
            if "bias" in pname:
                p.copy_(torch.randn(p.shape) * 0.5)
    params = {k: f32(v) for k, v in m.state_dict().items()}
    m = m.double()
    for k, v in m.state_dict().items():
        assert np.array_equal(v.numpy().astype(np.float32).astype(np.float64), v.numpy()), k

    batched = B > 0
    nb = B if batched else 1
    lead = (B,) if batched else ()
    x = rounded(rng, lead + (L, E))
    kx = rounded(rng, lead + (S, kdim)) if cross else None
    vx = rounded(rng, lead + (S, vdim)) if cross else None
    dy = rounded(rng, lead + (L, E))
    appended = int(bias_kv) + int(zero_attn)

    # Masks, redrawn until no query row is fully masked (appended keys always
    # count as visible) other than the rows a dead_* case empties on purpose.
    allowed_dead = np.zeros((nb, H, L), dtype=bool)
    if dead == "batch":
        allowed_dead[1] = True
    elif dead == "rows":
        allowed_dead[0, :, 0] = True
    for _attempt in range(1000):
        kpm_arr = mask_arr = None
        blocked = np.zeros((nb, H, L, S), dtype=bool)
        if kpm == "bool":
            kpm_arr = rng.random_sample((nb, S)) < 0.3
            if dead == "batch":
                kpm_arr[1, :] = True
            elif dead == "rows":
                kpm_arr[0, 0] = True
            blocked |= kpm_arr[:, None, None, :]
        elif kpm == "float":
            kpm_arr = rng.standard_normal((nb, S)).astype(np.float32).astype(np.float64)
            kpm_arr[rng.random_sample((nb, S)) < 0.2] = -np.inf
            blocked |= np.isneginf(kpm_arr)[:, None, None, :]
        if mask in ("bool2", "bool3"):
            shape = (L, S) if mask == "bool2" else (nb * H, L, S)
            mask_arr = rng.random_sample(shape) < 0.3
            blocked |= mask_arr.reshape((1, 1, L, S) if mask == "bool2" else (nb, H, L, S))
        elif mask in ("float2", "float3"):
            shape = (L, S) if mask == "float2" else (nb * H, L, S)
            mask_arr = rng.standard_normal(shape).astype(np.float32).astype(np.float64)
            mask_arr[rng.random_sample(shape) < 0.2] = -np.inf
            blocked |= np.isneginf(mask_arr).reshape(
                (1, 1, L, S) if mask == "float2" else (nb, H, L, S))
        if causal:
            blocked |= np.triu(np.ones((L, S), dtype=bool), 1)
        row_dead = blocked.all(axis=-1) & (appended == 0)
        if np.array_equal(row_dead, allowed_dead):
            break
    else:
        raise RuntimeError(name + ": could not draw masks without fully masked rows")

    # What torch receives.
    t_kpm = t_mask = None
    if kpm_arr is not None:
        t_kpm = torch.from_numpy(kpm_arr if kpm == "bool" else kpm_arr.copy())
        if not batched:
            t_kpm = t_kpm[0]
    if mask_arr is not None:
        t_mask = torch.from_numpy(mask_arr.copy())
    if causal:
        tri = torch.triu(torch.ones(L, S, dtype=torch.bool), 1)
        if t_mask is None:
            t_mask = tri
        elif t_mask.dtype == torch.bool:
            t_mask = t_mask | tri
        else:
            t_mask = t_mask.masked_fill(tri, float("-inf"))
    if kpm == "float" and t_mask is not None:
        # torch 2.x semantics (both added): hand torch the sum as one 3-D mask
        add = t_mask.double() if t_mask.dtype != torch.bool else \
            torch.zeros(t_mask.shape, dtype=torch.float64).masked_fill(t_mask, float("-inf"))
        if add.dim() == 2:
            add = add.expand(nb * H, L, S)
        kp = torch.from_numpy(kpm_arr).repeat_interleave(H, dim=0)[:, None, :]
        t_mask, t_kpm = add + kp, None

    tx = torch.tensor(x, requires_grad=True)
    tk = torch.tensor(kx, requires_grad=True) if cross else tx
    tv = torch.tensor(vx, requires_grad=True) if cross else tx
    live = slice(None)
    if dead == "batch":
        # torch gives NaN for batch 1; attn gives out_proj.bias. Run torch on
        # batch 0 only and write batch 1's expectation by hand.
        live = slice(0, 1)
    q_in, k_in, v_in = tx[live], tk[live], tv[live]
    kpm_in = t_kpm[live] if t_kpm is not None else None
    assert torch.is_grad_enabled()
    y, w = m(q_in, k_in, v_in, key_padding_mask=kpm_in, attn_mask=t_mask,
             need_weights=weights is not None, average_attn_weights=weights != "head")
    (y * torch.tensor(dy[live])).sum().backward()
    y = y.detach().numpy()
    w = w.detach().numpy() if w is not None else None

    if dead == "batch":
        y = np.concatenate([y, np.broadcast_to(params["out_proj.bias"], (1, L, E))])
        if w is not None:
            w = np.concatenate([w, np.zeros((1,) + w.shape[1:])])
    dead_rows = np.isnan(y).any(axis=-1)
    if dead == "rows":
        assert dead_rows.any() and not backward
        y[dead_rows] = params["out_proj.bias"] if bias else 0.0
        if w is not None:
            w[np.isnan(w)] = 0.0
    else:
        assert not dead_rows.any(), name
    assert not np.isnan(y).any() and (w is None or not np.isnan(w).any()), name

    c = Case(name)
    c.safetensors("params.safetensors", params)
    c.npy("query.npy", x)
    if cross:
        c.npy("key.npy", kx)
        c.npy("value.npy", vx)
    if kpm_arr is not None:
        c.npy("key_padding_mask.npy", kpm_arr if batched else kpm_arr[0])
    if mask_arr is not None:
        c.npy("attn_mask.npy", mask_arr)
    c.npy("out.npy", y)
    if w is not None:
        c.npy("attn_weights.npy" if weights == "avg" else "attn_weights_per_head.npy", w)
    opts = "--num-heads %d" % H
    if causal:
        opts += " --causal"
    if zero_attn:
        opts += " --add-zero-attn"
    c.args(opts)

    if backward:
        grads = {}
        for pname, p in m.named_parameters():
            g = p.grad.numpy()
            if dead == "batch" and pname == "out_proj.bias":
                g = g + dy[1].sum(axis=0)  # batch 1's output is the bias alone
            grads[pname] = g
        assert set(grads) == set(params), name
        grads["query"] = tx.grad.numpy()
        if cross:
            grads["key"] = tk.grad.numpy()
            grads["value"] = tv.grad.numpy()
        for k, v in grads.items():
            assert np.isfinite(v).all(), (name, k)
        c.npy("grad_out.npy", dy)
        c.safetensors("grads.safetensors", grads)
    return name


def mha_cases():
    cases = [
        # name, seed, keywords
        ("mha_self_basic", dict(E=8, H=2, L=5, B=2, weights="avg")),
        ("mha_self_h1", dict(E=4, H=1, L=3, B=1, weights="avg")),
        ("mha_self_h3_per_head", dict(E=12, H=3, L=6, B=2, weights="head")),
        ("mha_self_h4", dict(E=16, H=4, L=7, B=3)),
        ("mha_self_nobias", dict(E=8, H=2, L=5, B=2, bias=False, weights="avg")),
        ("mha_self_bias_kv", dict(E=8, H=2, L=5, B=2, bias_kv=True, weights="head")),
        ("mha_self_zero_attn", dict(E=8, H=2, L=4, B=2, zero_attn=True, weights="avg")),
        ("mha_self_bias_kv_zero_attn", dict(E=12, H=3, L=5, B=2, bias_kv=True, zero_attn=True,
                                            weights="head")),
        ("mha_self_nobias_bias_kv_zero_attn", dict(E=8, H=4, L=5, B=2, bias=False, bias_kv=True,
                                                   zero_attn=True, weights="avg")),
        ("mha_cross_basic", dict(E=8, H=2, L=4, S=6, B=2, cross=True, weights="avg")),
        ("mha_cross_kdim_vdim", dict(E=8, H=2, L=4, S=6, B=2, cross=True, kdim=5, vdim=7)),
        ("mha_cross_kdim_vdim_nobias", dict(E=6, H=3, L=5, S=4, B=2, cross=True, kdim=3, vdim=3,
                                            bias=False, weights="head")),
        ("mha_cross_kdim_only", dict(E=8, H=2, L=3, S=5, B=2, cross=True, kdim=6)),
        ("mha_cross_vdim_only", dict(E=8, H=4, L=3, S=5, B=1, cross=True, vdim=3, weights="avg")),
        ("mha_cross_kdim_bias_kv_zero_kpm", dict(E=8, H=2, L=4, S=5, B=3, cross=True, kdim=5,
                                                 vdim=4, bias_kv=True, zero_attn=True, kpm="bool",
                                                 weights="head")),
        ("mha_unbatched_self", dict(E=8, H=2, L=5, B=0, weights="avg")),
        ("mha_unbatched_cross_kdim", dict(E=8, H=2, L=4, S=6, B=0, cross=True, kdim=5, vdim=3,
                                          weights="head")),
        ("mha_unbatched_kpm_bool", dict(E=8, H=2, L=5, B=0, kpm="bool", weights="avg")),
        ("mha_unbatched_kpm_float", dict(E=8, H=2, L=5, B=0, kpm="float")),
        ("mha_unbatched_mask_bool3", dict(E=8, H=2, L=5, B=0, mask="bool3", weights="head")),
        ("mha_unbatched_mask_float2", dict(E=6, H=3, L=4, B=0, mask="float2")),
        ("mha_unbatched_causal", dict(E=8, H=2, L=6, B=0, causal=True, weights="head")),
        ("mha_kpm_bool", dict(E=8, H=2, L=6, B=3, kpm="bool", weights="avg")),
        ("mha_kpm_float", dict(E=8, H=2, L=6, B=2, kpm="float", weights="head")),
        ("mha_kpm_float_cross", dict(E=8, H=4, L=3, S=7, B=2, cross=True, kpm="float")),
        ("mha_mask_bool2", dict(E=8, H=2, L=6, B=2, mask="bool2", weights="avg")),
        ("mha_mask_float2", dict(E=8, H=2, L=6, B=2, mask="float2", weights="avg")),
        ("mha_mask_bool3", dict(E=8, H=2, L=5, B=2, mask="bool3", weights="head")),
        ("mha_mask_float3", dict(E=12, H=3, L=5, B=2, mask="float3", weights="head")),
        ("mha_kpm_bool_mask_bool2", dict(E=8, H=2, L=6, B=2, kpm="bool", mask="bool2")),
        ("mha_kpm_bool_mask_float2", dict(E=8, H=2, L=6, B=2, kpm="bool", mask="float2",
                                          weights="avg")),
        ("mha_kpm_bool_mask_bool3", dict(E=8, H=4, L=5, B=2, kpm="bool", mask="bool3")),
        ("mha_kpm_bool_mask_float3_cross", dict(E=8, H=2, L=4, S=7, B=2, cross=True, kpm="bool",
                                                mask="float3", weights="head")),
        ("mha_kpm_float_mask_float2", dict(E=8, H=2, L=5, B=2, kpm="float", mask="float2")),
        ("mha_causal_self", dict(E=8, H=2, L=7, B=2, causal=True, weights="avg")),
        ("mha_causal_cross_short_query", dict(E=8, H=2, L=4, S=7, B=2, cross=True, causal=True)),
        ("mha_causal_cross_long_query", dict(E=8, H=2, L=7, S=4, B=2, cross=True, causal=True,
                                             weights="head")),
        ("mha_causal_mask_bool2", dict(E=8, H=2, L=6, B=2, causal=True, mask="bool2")),
        ("mha_causal_mask_float3", dict(E=8, H=2, L=6, B=2, causal=True, mask="float3",
                                        weights="avg")),
        ("mha_causal_kpm_bool", dict(E=8, H=2, L=6, B=3, causal=True, kpm="bool")),
        ("mha_causal_bias_kv_zero_kpm", dict(E=8, H=2, L=5, B=2, causal=True, bias_kv=True,
                                             zero_attn=True, kpm="bool", weights="head")),
        ("mha_mask_bool2_bias_kv", dict(E=8, H=2, L=5, B=2, mask="bool2", bias_kv=True)),
        ("mha_mask_float3_zero_attn", dict(E=8, H=2, L=5, B=2, mask="float3", zero_attn=True,
                                           weights="avg")),
        ("mha_kpm_float_bias_kv", dict(E=8, H=2, L=5, B=2, kpm="float", bias_kv=True)),
        ("mha_size1", dict(E=2, H=1, L=1, B=1, weights="avg")),
        ("mha_head_dim1", dict(E=4, H=4, L=3, B=2, weights="head")),
        ("mha_odd_sizes", dict(E=15, H=3, L=7, S=9, B=2, cross=True, kdim=11, vdim=13,
                               kpm="bool", mask="bool3")),
        ("mha_nobias_mask_float2_per_head", dict(E=8, H=2, L=5, B=2, bias=False, mask="float2",
                                                 weights="head")),
        ("mha_big_cross", dict(E=32, H=4, L=33, S=47, B=2, cross=True, kpm="bool",
                               mask="float2")),
        ("mha_big_self_causal", dict(E=64, H=4, L=40, B=2, causal=True, weights="avg")),
        ("mha_everything", dict(E=16, H=4, L=6, S=8, B=2, cross=True, kdim=10, vdim=12,
                                bias_kv=True, zero_attn=True, kpm="bool", mask="float3",
                                causal=True, weights="head")),
        ("mha_unbatched_everything", dict(E=12, H=3, L=5, S=7, B=0, cross=True, kdim=9,
                                          bias_kv=True, zero_attn=True, kpm="bool",
                                          mask="bool2", causal=True, weights="avg")),
        # A whole batch element padded away: torch gives NaN, attn out_proj.bias.
        ("mha_dead_batch", dict(E=8, H=2, L=4, B=2, kpm="bool", dead="batch",
                                weights="avg")),
        # Row 0 of batch 0 sees only key 0 (causal) and key 0 is padded.
        ("mha_dead_rows", dict(E=8, H=2, L=5, B=2, causal=True, kpm="bool", dead="rows",
                               weights="head", backward=False)),
        # causal with each kind of appended key alone (appended keys stay visible)
        ("mha_causal_bias_kv", dict(E=8, H=2, L=5, B=2, causal=True, bias_kv=True,
                                    weights="head")),
        ("mha_causal_zero_attn", dict(E=8, H=2, L=5, B=2, causal=True, zero_attn=True,
                                      weights="avg")),
        ("mha_causal_cross_zero_attn_long_key", dict(E=8, H=2, L=3, S=6, B=2, cross=True,
                                                     causal=True, zero_attn=True)),
    ]
    names = []
    for i, (name, kw) in enumerate(cases):
        names.append(mha_case(name, 1000 + i, **kw))
    return names


# --------------------------------------------------------------------- SDPA

def sdpa_case(name, seed, q_shape, k_heads=None, Nk=None, Dv=None, scale=None, mask=None,
              causal=None, lse=True, weights=True, backward=True, dead_row=None):
    """One SDPA configuration. q_shape (B,H,Nq,D), (H,Nq,D) or (Nq,D).
    mask: None or (kind, shape) with kind 'bool' (true = attend) or 'float'
    (added, with -inf entries). causal: None|'top-left'|'bottom-right'.
    dead_row: index of a query row whose mask is emptied (bool False / float -inf)."""
    rng = np.random.RandomState(seed)
    rank = len(q_shape)
    full = (1,) * (4 - rank) + tuple(q_shape)
    B, Hq, Nq, D = full
    Hkv = k_heads or Hq
    Nk = Nk or Nq
    Dv = Dv or D
    assert Hq % Hkv == 0
    strip = 4 - rank
    q = rounded(rng, full)
    k = rounded(rng, (B, Hkv, Nk, D))
    v = rounded(rng, (B, Hkv, Nk, Dv))
    do = rounded(rng, (B, Hq, Nq, Dv))
    mask_arr = None
    if mask is not None:
        kind, mshape = mask
        if kind == "bool":
            mask_arr = rng.random_sample(mshape) < 0.75
            if dead_row is not None:
                mask_arr[..., dead_row, :] = False
        else:
            mask_arr = rng.standard_normal(mshape).astype(np.float32).astype(np.float64)
            mask_arr[rng.random_sample(mshape) < 0.2] = -np.inf
            if dead_row is not None:
                mask_arr[..., dead_row, :] = -np.inf
    sc = 1.0 / np.sqrt(D) if scale is None else float(np.float32(scale))

    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    group = Hq // Hkv
    kk = tk.repeat_interleave(group, dim=1)
    vv = tv.repeat_interleave(group, dim=1)
    s = torch.matmul(tq, kk.transpose(-2, -1)) * sc
    if mask_arr is not None:
        tm = torch.from_numpy(mask_arr.copy())
        if tm.dtype == torch.bool:
            s = s.masked_fill(~tm, float("-inf"))
        else:
            s = s + tm
    if causal is not None:
        i = torch.arange(Nq)[:, None]
        j = torch.arange(Nk)[None, :]
        hidden = j > i if causal == "top-left" else j > i + Nk - Nq
        s = s.masked_fill(hidden, float("-inf"))
    dead = torch.isneginf(s).all(dim=-1, keepdim=True)  # (B,Hq,Nq,1)
    s_safe = torch.where(dead, torch.zeros_like(s), s)
    p = torch.where(dead, torch.zeros_like(s), torch.softmax(s_safe, dim=-1))
    o = torch.matmul(p, vv)
    lse_t = torch.logsumexp(s, dim=-1)  # -inf on dead rows
    (o * torch.tensor(do)).sum().backward()
    if dead_row is not None or causal == "bottom-right" and Nq > Nk:
        assert dead.any(), name
    else:
        assert not dead.any(), name
    for t in (o, p, tq.grad, tk.grad, tv.grad):
        assert torch.isfinite(t).all(), name

    def cut(a):  # drop the leading dims the query file does not have
        a = np.asarray(a.detach().numpy() if isinstance(a, torch.Tensor) else a)
        return a.reshape(a.shape[strip:])

    c = Case(name)
    c.npy("query.npy", cut(q))
    c.npy("key.npy", cut(k))
    c.npy("value.npy", cut(v))
    if mask_arr is not None:
        c.npy("attn_mask.npy", mask_arr)
    c.npy("out.npy", cut(o))
    if lse:
        c.npy("lse.npy", cut(lse_t))
    if weights:
        c.npy("attn_weights.npy", cut(p))
    opts = []
    if causal:
        opts.append("--causal " + causal)
    if scale is not None:
        opts.append("--scale %s" % repr(float(np.float32(scale))))
    c.args(" ".join(opts))
    if backward:
        c.npy("grad_out.npy", cut(do))
        c.npy("grad_query.npy", cut(tq.grad))
        c.npy("grad_key.npy", cut(tk.grad))
        c.npy("grad_value.npy", cut(tv.grad))
    return name


def sdpa_cases():
    cases = [
        ("sdpa_basic_4d", dict(q_shape=(2, 3, 5, 8), Nk=7)),
        ("sdpa_rank3", dict(q_shape=(3, 4, 6), Nk=9)),
        ("sdpa_rank2", dict(q_shape=(5, 4), Nk=6)),
        ("sdpa_gqa", dict(q_shape=(2, 4, 5, 8), k_heads=2, Nk=6)),
        ("sdpa_mqa_rank3", dict(q_shape=(6, 4, 8), k_heads=1, Nk=5)),
        ("sdpa_dv_ne_d", dict(q_shape=(2, 2, 4, 8), Nk=6, Dv=5)),
        ("sdpa_scale", dict(q_shape=(1, 2, 5, 8), Nk=5, scale=0.3)),
        ("sdpa_mask_bool_nq_nk", dict(q_shape=(2, 2, 5, 4), Nk=7, mask=("bool", (5, 7)))),
        ("sdpa_mask_bool_1_nk", dict(q_shape=(2, 2, 5, 4), Nk=7, mask=("bool", (1, 7)))),
        ("sdpa_mask_bool_b1", dict(q_shape=(2, 3, 4, 4), Nk=6, mask=("bool", (2, 1, 4, 6)))),
        ("sdpa_mask_bool_full", dict(q_shape=(2, 2, 4, 4), Nk=5, mask=("bool", (2, 2, 4, 5)))),
        ("sdpa_mask_float_nq_nk", dict(q_shape=(2, 2, 5, 4), Nk=6, mask=("float", (5, 6)))),
        ("sdpa_mask_float_b1", dict(q_shape=(2, 2, 4, 8), Nk=6, mask=("float", (2, 1, 4, 6)))),
        ("sdpa_mask_float_1_nk_rank3", dict(q_shape=(2, 4, 4), Nk=6, mask=("float", (1, 6)))),
        ("sdpa_causal_tl_short_q", dict(q_shape=(1, 2, 4, 8), Nk=7, causal="top-left")),
        ("sdpa_causal_tl_long_q", dict(q_shape=(1, 2, 7, 8), Nk=4, causal="top-left")),
        ("sdpa_causal_br_short_q", dict(q_shape=(1, 2, 4, 8), Nk=7, causal="bottom-right")),
        ("sdpa_causal_br_long_q", dict(q_shape=(1, 2, 7, 8), Nk=4, causal="bottom-right")),
        ("sdpa_causal_mask_bool", dict(q_shape=(2, 2, 6, 4), Nk=6, causal="top-left",
                                       mask=("bool", (6, 6)))),
        ("sdpa_causal_br_mask_float", dict(q_shape=(2, 2, 3, 4), Nk=6, causal="bottom-right",
                                           mask=("float", (2, 1, 3, 6)))),
        ("sdpa_dead_row_bool", dict(q_shape=(2, 2, 5, 4), Nk=6, mask=("bool", (5, 6)),
                                    dead_row=2)),
        ("sdpa_dead_row_float", dict(q_shape=(2, 5, 4), Nk=6, mask=("float", (2, 5, 6)),
                                     dead_row=0)),
        ("sdpa_size1", dict(q_shape=(1, 1, 1, 1), Nk=1)),
        ("sdpa_size1_many_keys", dict(q_shape=(1, 1), Nk=9)),
        ("sdpa_gqa_everything_rank3", dict(q_shape=(4, 5, 6), k_heads=2, Nk=7, Dv=3,
                                           scale=0.7, causal="bottom-right",
                                           mask=("bool", (4, 5, 7)))),
        ("sdpa_big_causal_br", dict(q_shape=(1, 2, 67, 32), Nk=129, causal="bottom-right",
                                    weights=False)),
        ("sdpa_big_gqa_mask", dict(q_shape=(2, 4, 64, 16), k_heads=2, Nk=80, Dv=24,
                                   mask=("float", (64, 80)), weights=False)),
    ]
    names = []
    for i, (name, kw) in enumerate(cases):
        names.append(sdpa_case(name, 2000 + i, **kw))
    return names


def main():
    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    os.makedirs(OUT_DIR)
    names = mha_cases() + sdpa_cases()
    total = 0
    for root, _dirs, files in os.walk(OUT_DIR):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print("torch %s: %d cases (%d mha, %d sdpa), %.1f KiB in %s" % (
        torch.__version__, len(names), sum(n.startswith("mha_") for n in names),
        sum(n.startswith("sdpa_") for n in names), total / 1024.0,
        os.path.relpath(OUT_DIR)), file=sys.stderr)


if __name__ == "__main__":
    main()
