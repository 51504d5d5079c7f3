"""The flash-attn package's calls on attn's CPU kernels: same names, argument
order, layouts and defaults, so code written for FlashAttention runs on the
CPU by changing the import:

    from attn.flash_attn import flash_attn_func, flash_attn_varlen_func, \\
        flash_attn_with_kvcache

Tensors are (batch, seqlen, nheads, headdim). NumPy arrays or torch CPU
tensors (with autograd for flash_attn_func and flash_attn_varlen_func).
As in flash-attn: causal is aligned to the bottom-right corner (query i sees
keys j <= i + seqlen_k - seqlen_q), window_size=(-1, -1) is unbounded, GQA
reads kv head h // (nheads / nheads_k), softmax_lse is natural-log
(batch, nheads, seqlen_q) (varlen: (nheads, total_q)), and a query that sees
no key gives 0. attn is always deterministic, so `deterministic` changes
nothing. Differences: return_attn_probs gives the exact probabilities before
dropout (flash-attn's are "for testing only" and encode dropout as signs);
results are float32, except that float16 inputs stay float16 and, in
flash_attn_with_kvcache, bfloat16 torch tensors stay bfloat16 (the library
reads and writes 16-bit storage; arithmetic is float32).
"""
import numpy as np

from . import _tensor
from ._sdpa_call import integer, window_side
from .sdpa import alibi_slopes as _alibi_slopes
from .sdpa import scaled_dot_product_attention as _sdpa
from .varlen import varlen_attention

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "get_alibi_slopes"]


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _torch_api():
    from . import _flash_torch
    return _flash_torch


def window(window_size):
    """flash-attn's window_size as attn's window: None when unbounded."""
    if window_size is None:
        return None
    if len(window_size) != 2:
        raise ValueError(f"window_size: expected (left, right), got {window_size!r}")
    left, right = (window_side(x, n) for x, n in zip(window_size, ("window_size[0]",
                                                                   "window_size[1]")))
    return None if (left, right) == (-1, -1) else (left, right)


def _bnhd(x, name):
    a = np.asarray(x)
    if a.ndim != 4:
        raise ValueError(f"{name}: expected (batch, seqlen, nheads, headdim), got shape "
                         f"{a.shape}")
    return a


def get_alibi_slopes(nheads):
    """The standard ALiBi slopes (nheads,) float32, what flash-attn's tests
    and BLOOM use: pass as alibi_slopes=."""
    return _alibi_slopes(nheads)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, *, precision="exact"):
    """out (batch, seqlen_q, nheads, headdim_v); with return_attn_probs,
    (out, softmax_lse (batch, nheads, seqlen_q), probs (batch, nheads,
    seqlen_q, seqlen_k)). q (batch, seqlen_q, nheads, headdim), k and v
    (batch, seqlen_k, nheads_k, headdim[_v]); alibi_slopes (nheads,) or
    (batch, nheads). precision (keyword, attn's): "exact" or "bf16"."""
    if _is_torch(q):
        return _torch_api().flash_attn_func(q, k, v, dropout_p, softmax_scale, causal,
                                            window_size, softcap, alibi_slopes, deterministic,
                                            return_attn_probs, precision)
    q, k, v = (_bnhd(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    qf = _tensor.floating(q, "q")
    B, N, H = qf.shape[:3]
    out = np.empty((B, N, H, v.shape[3]), np.float16 if qf.dtype == np.float16 else np.float32)
    res = _sdpa(qf.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2), None, dropout_p, causal,
                softmax_scale, True, causal_alignment="bottom_right", window=window(window_size),
                softcap=softcap, alibi_slopes=alibi_slopes, return_lse=return_attn_probs,
                need_weights=return_attn_probs, out=out.swapaxes(1, 2), precision=precision)
    return (out,) + tuple(res[1:]) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *,
                           precision="exact"):
    """out (total_q, nheads, headdim_v) over packed sequences; with
    return_attn_probs, (out, softmax_lse (nheads, total_q), probs (batch,
    nheads, max_seqlen_q, max_seqlen_k) float32: sequence b's softmax
    weights before dropout in probs[b, :, :len_q, :len_k], zeros elsewhere).
    flash-attn returns the same first two and, for the third, an empty
    tensor unless dropout_p > 0, then (batch, nheads, max_seqlen_q and
    max_seqlen_k rounded up to 128) "for testing only", dropped weights
    negative. q (total_q, nheads,
    headdim), k, v (total_k, nheads_k, headdim[_v]); cu_seqlens_* (batch + 1,)
    int32 offsets. Sequences longer than max_seqlen_* are an error."""
    if block_table is not None:
        raise NotImplementedError("block_table: a paged KV cache in flash_attn_varlen_func is "
                                  "not supported; use flash_attn_with_kvcache")
    if _is_torch(q):
        return _torch_api().flash_attn_varlen_func(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
            return_attn_probs, precision)
    check_max_seqlens(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    out, lse, _, seed = varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                         softmax_scale=softmax_scale, causal=causal,
                                         window=window(window_size), softcap=softcap,
                                         alibi_slopes=alibi_slopes, dropout_p=dropout_p,
                                         precision=precision)
    if not return_attn_probs:
        return out
    return out, lse, varlen_probs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes, precision)


def check_max_seqlens(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    for cu, most, name in ((cu_seqlens_q, max_seqlen_q, "max_seqlen_q"),
                           (cu_seqlens_k, max_seqlen_k, "max_seqlen_k")):
        most = integer(most, name)
        lengths = np.diff(np.asarray(cu, dtype=np.int64))
        if lengths.size and lengths.max() > most:
            raise ValueError(f"{name}: {most}, but a sequence has {int(lengths.max())} tokens")


def varlen_probs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                 causal, window_size, softcap, alibi_slopes, precision="exact"):
    """The softmax probabilities of each sequence, (batch, nheads,
    max_seqlen_q, max_seqlen_k) zero-padded (return_attn_probs)."""
    cq, ck = (np.asarray(c, dtype=np.int64) for c in (cu_seqlens_q, cu_seqlens_k))
    q, k, v = (np.asarray(x) for x in (q, k, v))
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes)
    probs = np.zeros((cq.size - 1, q.shape[1], max_seqlen_q, max_seqlen_k), np.float32)
    for s in range(cq.size - 1):
        qs, ks, vs = q[cq[s]:cq[s + 1]], k[ck[s]:ck[s + 1]], v[ck[s]:ck[s + 1]]
        sl = slopes[s] if slopes is not None and slopes.ndim == 2 else slopes
        _, w = _sdpa(qs.swapaxes(0, 1), ks.swapaxes(0, 1), vs.swapaxes(0, 1), None, 0.0, causal,
                     softmax_scale, True, causal_alignment="bottom_right",
                     window=window(window_size), softcap=softcap, alibi_slopes=sl,
                     need_weights=True, precision=precision)
        probs[s, :, :w.shape[1], :w.shape[2]] = w
    return probs


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False, *, precision="exact"):
    """Appends k, v (batch, seqlen_new, nheads_k, headdim) to the caches IN
    PLACE at cache_seqlens (which, as in flash-attn, the caller advances),
    then attends q (batch, seqlen_q, nheads, headdim) to each entry's
    cache_seqlens[b] + seqlen_new keys. Caches: (batch_cache, seqlen_cache,
    nheads_k, headdim), or with block_table (batch, max_blocks) int32 a paged
    pool (num_blocks, page_block_size, nheads_k, headdim); float32, float16
    or (torch) bfloat16, new keys stored in the cache's dtype.
    cache_batch_idx: entry b uses cache row cache_batch_idx[b];
    cache_leftpad: entry b's keys start at cache_leftpad[b] (the ones before
    are not attended; rotary positions still count from the row's start, as
    flash-attn's kernel reads cos/sin); both for contiguous caches only, as
    in flash-attn. Returns out
    (batch, seqlen_q, nheads, headdim_v), and softmax_lse (batch, nheads,
    seqlen_q) with return_softmax_lse. No autograd (flash-attn has none).
    rotary_cos, rotary_sin (seqlen_ro, rotary_dim / 2), only with k and v:
    the new keys and q are rotated (copies; the caller's are left alone),
    key t at cache_seqlens + t, query i at cache_seqlens + i when causal or
    local, else every query at cache_seqlens; rotary_interleaved pairs
    features 2i, 2i + 1, else i, i + rotary_dim / 2 (GPT-NeoX)."""
    from ._kvcache import with_kvcache
    return with_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                        cache_batch_idx, cache_leftpad, block_table, softmax_scale, causal,
                        window(window_size), softcap, rotary_interleaved, alibi_slopes,
                        num_splits, return_softmax_lse, precision)
