"""Packed variable-length batches on NumPy arrays (libattn's attn_sdpa_varlen):
sequence s owns query tokens [cu_seqlens_q[s], cu_seqlens_q[s+1]) of q
(total_q, Hq, D) and key tokens [cu_seqlens_k[s], cu_seqlens_k[s+1]) of k, v
(total_k, Hkv, D); each sequence is its own attention problem (causal
bottom-right aligned per sequence), nothing attends across a boundary.
"""
import ctypes as C
import secrets

import numpy as np

from . import _structs as S
from . import _tensor
from . import _threads
from ._errors import check, new_error
from ._lib import lib
from . import _fast
from ._sdpa_call import precision_code, uint64, window_side


class _Seqs:
    """The attn_varlen_seqs of two offset arrays (int32 kept as is)."""

    def __init__(self, cu_seqlens_q, cu_seqlens_k):
        arrays = []
        for x, name in ((cu_seqlens_q, "cu_seqlens_q"), (cu_seqlens_k, "cu_seqlens_k")):
            a = np.asarray(x)
            if a.ndim != 1 or a.dtype.kind not in "iu" or a.size < 1:
                raise ValueError(f"{name}: expected a 1-D integer array of nseq + 1 offsets, "
                                 f"got {a.dtype} {a.shape}")
            arrays.append(a)
        if arrays[0].size != arrays[1].size:
            raise ValueError(f"cu_seqlens_q, cu_seqlens_k: {arrays[0].size} and "
                             f"{arrays[1].size} offsets, expected the same number")
        i32 = all(a.dtype == np.int32 for a in arrays)
        dtype = np.int32 if i32 else np.int64
        self.q, self.k = (np.ascontiguousarray(a, dtype=dtype) for a in arrays)
        self.struct = S.attn_varlen_seqs(self.q.size - 1, S.OFFSETS_I32 if i32 else S.OFFSETS_I64,
                                         self.q.ctypes.data, self.k.ctypes.data)

    def lengths(self):
        return np.diff(self.q.astype(np.int64)), np.diff(self.k.astype(np.int64))


def _options(keep, scale, causal, window, softcap, alibi_slopes, dropout_p, dropout_seed,
             num_threads, precision):
    o = S.attn_sdpa_opts()
    o.precision = precision_code(precision)
    o.scale = _fast.scale_option(scale)
    o.causal = S.CAUSAL_BOTTOM_RIGHT if causal else S.CAUSAL_NONE
    if window is not None:
        o.window.enabled = True
        o.window.left = window_side(window[0], "window left")
        o.window.right = window_side(window[1], "window right")
    o.softcap = float(softcap)
    if alibi_slopes is not None:
        t = _tensor.view(_tensor.float32(alibi_slopes, "alibi_slopes"), "alibi_slopes")
        keep.append(t)
        o.alibi_slopes = C.pointer(t)
    o.dropout_p = float(dropout_p)
    o.dropout_seed = uint64(dropout_seed, "dropout_seed")
    o.num_threads = _threads.resolve(num_threads)
    return o


def _inputs(q, k, v):
    arrays = tuple(_tensor.floating(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    for a, n in zip(arrays, "qkv"):
        if a.ndim != 3:
            raise ValueError(f"{n}: expected (total, heads, head_dim), got shape {a.shape}")
    return arrays


def _ptr(keep, a, name):
    t = _tensor.view(a, name)
    keep.append(t)
    return C.pointer(t)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, *, softmax_scale=None, causal=False,
                     window=None, softcap=0.0, alibi_slopes=None, dropout_p=0.0,
                     dropout_seed=None, num_threads=None, precision="exact"):
    """(out (total_q, Hq, Dv), lse (Hq, total_q), stats (total_q, Hq, 2),
    dropout_seed): the forward over packed sequences. lse is FlashAttention's
    layout (natural log); stats is what varlen_attention_backward reads."""
    q, k, v = _inputs(q, k, v)
    seqs = _Seqs(cu_seqlens_q, cu_seqlens_k)
    if dropout_seed is None:
        dropout_seed = secrets.randbits(63) if dropout_p else 0
    keep = []
    o = _options(keep, softmax_scale, causal, window, softcap, alibi_slopes,
                 dropout_p, dropout_seed, num_threads, precision)
    total, hq = q.shape[0], q.shape[1]
    out = np.empty((total, hq, v.shape[2]), np.float16 if q.dtype == np.float16 else np.float32)
    lse = np.empty((hq, total), np.float32)
    stats = np.empty((total, hq, 2), np.float32)
    o.softmax_stats = _ptr(keep, stats, "softmax_stats")
    err = new_error()
    check(lib.attn_sdpa_varlen(_ptr(keep, q, "q"), _ptr(keep, k, "k"), _ptr(keep, v, "v"),
                               C.byref(seqs.struct), _ptr(keep, out, "out"),
                               _ptr(keep, lse.T, "softmax_lse"), C.byref(o), C.byref(err)), err)
    return out, lse, stats, dropout_seed


def varlen_attention_backward(dout, q, k, v, cu_seqlens_q, cu_seqlens_k, out, stats, *,
                              softmax_scale=None, causal=False, window=None, softcap=0.0,
                              alibi_slopes=None, dropout_p=0.0, dropout_seed=0,
                              num_threads=None, needs_grad=(True, True, True),
                              precision="exact"):
    """(dq, dk, dv) of <dout, varlen_attention(...)>, from the forward's out
    and stats (None for the ones not in needs_grad)."""
    q, k, v = _inputs(q, k, v)
    seqs = _Seqs(cu_seqlens_q, cu_seqlens_k)
    keep = []
    o = _options(keep, softmax_scale, causal, window, softcap, alibi_slopes,
                 dropout_p, dropout_seed, num_threads, precision)
    o.softmax_stats = _ptr(keep, _tensor.float32(stats, "stats"), "softmax_stats")
    grads = [np.empty(a.shape, np.float16 if a.dtype == np.float16 else np.float32)
             if wanted else None for a, wanted in zip((q, k, v), needs_grad)]
    err = new_error()
    check(lib.attn_sdpa_varlen_backward(
        _ptr(keep, q, "q"), _ptr(keep, k, "k"), _ptr(keep, v, "v"), C.byref(seqs.struct),
        _ptr(keep, _tensor.floating(out, "out"), "out"), None,
        _ptr(keep, _tensor.floating(dout, "dout"), "dout"),
        *(_ptr(keep, g, n) if g is not None else None for g, n in zip(grads, ("dq", "dk", "dv"))),
        C.byref(o), C.byref(err)), err)
    return tuple(grads)


def lse_merge(out1, lse1, out2, lse2):
    """(out, lse): two partial attentions of the same queries over disjoint
    keys merged through their natural-log LSE (attn_lse_merge), as one
    attention over the union. out* (B, H, N, Dv) and lse* (B, H, N) arrays
    or views; float32 results."""
    keep = []
    a = [_tensor.float32(x, n) for x, n in ((out1, "out1"), (lse1, "lse1"), (out2, "out2"),
                                             (lse2, "lse2"))]
    out = np.empty(np.broadcast_shapes(a[0].shape, a[2].shape), np.float32)
    lse = np.empty(out.shape[:-1], np.float32)
    err = new_error()
    check(lib.attn_lse_merge(*(_ptr(keep, x, n) for x, n in zip(a, ("out1", "lse1", "out2",
                                                                    "lse2"))),
                             _ptr(keep, out, "out"), _ptr(keep, lse, "lse"), C.byref(err)), err)
    return out, lse
