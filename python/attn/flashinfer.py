"""FlashInfer's attention-state merges on attn_lse_merge:

    from attn.flashinfer import merge_state, merge_states

v (seq_len, num_heads, head_dim) partial outputs over disjoint key sets and s
(seq_len, num_heads) their log-sum-exp, in FlashInfer's convention: base 2
(log2 Σ 2^x of scores already scaled by log2(e)); pass log2=False for
natural-log LSEs (attn's and flash-attn's softmax_lse). NumPy arrays or
torch CPU tensors; float32 results. A state whose s is -inf (no key) has
weight 0.
"""
import math

import numpy as np

from .varlen import lse_merge

__all__ = ["merge_state", "merge_states"]

_LN2 = math.log(2.0)


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _arrays(*xs):
    return [x.detach().numpy() if _is_torch(x) else np.asarray(x) for x in xs]


def _check(v, s, vname, sname):
    if v.ndim != 3 or s.shape != v.shape[:2]:
        raise ValueError(f"{vname}, {sname}: expected (seq_len, num_heads, head_dim) and "
                         f"(seq_len, num_heads), got {v.shape} and {s.shape}")


def _merge(va, sa, vb, sb, log2):
    """(v, s) of two states, through attn_lse_merge's (B, H, N, D) views.
    Base-2 LSEs: the weights depend on s_a - s_b alone, so the row's larger
    s is taken off exactly (float64) before the scaling by ln 2, which then
    rounds the difference and not s itself (at |s| = 3e4 that was 0.6%)."""
    m = None
    if log2:
        sa, sb = np.asarray(sa, np.float64), np.asarray(sb, np.float64)
        m = np.maximum(sa, sb)
        m[~np.isfinite(m)] = 0.0  # -inf, +inf and NaN rows keep their values
        sa, sb = (((x - m) * _LN2).astype(np.float32) for x in (sa, sb))
    v, s = lse_merge(va.swapaxes(0, 1)[None], sa.swapaxes(0, 1)[None],
                     vb.swapaxes(0, 1)[None], sb.swapaxes(0, 1)[None])
    v, s = v[0].swapaxes(0, 1), s[0].swapaxes(0, 1)
    if log2:
        s = (s.astype(np.float64) / _LN2 + m).astype(np.float32)
    return np.ascontiguousarray(v), np.ascontiguousarray(s)


def _result(like, v, s):
    if _is_torch(like):
        import torch
        return torch.from_numpy(v), torch.from_numpy(s)
    return v, s


def merge_state(v_a, s_a, v_b, s_b, *, log2=True):
    """(V, S): the attention over the keys of both states, (seq_len,
    num_heads, head_dim) and (seq_len, num_heads)."""
    va, sa, vb, sb = _arrays(v_a, s_a, v_b, s_b)
    _check(va, sa, "v_a", "s_a")
    _check(vb, sb, "v_b", "s_b")
    if va.shape != vb.shape:
        raise ValueError(f"v_a, v_b: the two states must have one shape, got {va.shape} and {vb.shape}")
    return _result(v_a, *_merge(va, sa, vb, sb, log2))


def merge_states(v, s, *, log2=True):
    """(V, S) of num_states states merged in order: v (seq_len, num_states,
    num_heads, head_dim), s (seq_len, num_states, num_heads)."""
    va, sa = _arrays(v, s)
    if va.ndim != 4 or sa.shape != va.shape[:3] or va.shape[1] < 1:
        raise ValueError(f"v, s: expected (seq_len, num_states, num_heads, head_dim) and "
                         f"(seq_len, num_states, num_heads), got {va.shape} and {sa.shape}")
    mv, ms = np.ascontiguousarray(va[:, 0], np.float32), np.ascontiguousarray(sa[:, 0], np.float32)
    for i in range(1, va.shape[1]):
        mv, ms = _merge(mv, ms, va[:, i], sa[:, i], log2)
    return _result(v, mv, ms)
