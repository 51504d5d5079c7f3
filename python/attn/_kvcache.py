"""flash_attn_with_kvcache over caller-owned caches (NumPy arrays or torch
CPU tensors, written in place): append the new keys and values, then attend
each entry's keys where they lie (contiguous caches: strided views, no copy;
paged: a view when the entry's blocks are consecutive in the pool, else the
blocks gathered). Entries of equal length in consecutive cache rows go to
the library in one call. Rotary embeddings rotate copies of q and k with the
library's attn_rope_apply before the append."""
import ctypes as C

import numpy as np

from . import _structs as S
from . import _tensor as T
from ._errors import check, new_error
from ._lib import lib
from ._sdpa_call import integer
from .sdpa import scaled_dot_product_attention as _sdpa


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _torch():
    import torch
    return torch


def _array(x, name, writable=False):
    if x is None:
        return None
    if _is_torch(x):
        if x.device.type != "cpu":
            raise ValueError(f"{name}: tensors must be on the CPU, got {x.device}")
        if writable and x.requires_grad:
            raise ValueError(f"{name}: a cache written in place must not require grad")
        x = x.detach()
        if x.dtype == _torch().bfloat16:  # its bits, tagged (NumPy has no bfloat16)
            return x.view(_torch().int16).numpy().view(T.BF16)
        return x.numpy()
    a = np.asarray(x)
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: the cache is written in place and must be writable")
    return a


def _stored(a, cache, name):
    """New keys or values in the cache's dtype, as the append stores them
    (NumPy casts between float32 and float16 itself; bfloat16, kept as
    tagged uint16, it would cast as integers)."""
    if T.is_bf16(a) == T.is_bf16(cache):
        return a
    return T.round_to(T.float32(a, name), cache.dtype)


def _index_vector(x, name, batch):
    """An int32/int64 (batch,) vector (or a Python int for every entry)."""
    if x is None:
        return None
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return np.full(batch, integer(x, name), np.int64)
    a = _array(x, name)
    if a.dtype.kind not in "iu" or a.shape != (batch,):
        raise ValueError(f"{name}: expected an integer ({batch},) vector, got {a.dtype} "
                         f"{a.shape}")
    if (a < 0).any():
        raise ValueError(f"{name}: negative entries")
    return a.astype(np.int64)


def _rotary_tables(rotary_cos, rotary_sin, k, D):
    """The (seqlen_ro, rotary_dim / 2) cos and sin tables as float32 views."""
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos, rotary_sin: give both, or neither")
    if k is None:
        raise ValueError("rotary_cos, rotary_sin: only applicable with new keys and values "
                         "(k, v), as in flash-attn")
    tables = []
    for x, name in ((rotary_cos, "rotary_cos"), (rotary_sin, "rotary_sin")):
        if _is_torch(x) and x.is_floating_point():  # bfloat16 has no NumPy dtype
            x = x.float()
        a = _array(x, name)
        if a.dtype.kind != "f":
            raise TypeError(f"{name}: expected a floating-point table, got dtype {a.dtype}")
        if a.ndim != 2 or a.shape[1] < 1 or 2 * a.shape[1] > D:
            raise ValueError(f"{name}: expected (seqlen_ro, rotary_dim / 2) with 2 <= rotary_dim "
                             f"<= headdim {D}, got shape {a.shape}")
        tables.append(T.float32(a, name))
    if tables[0].shape != tables[1].shape:
        raise ValueError(f"rotary_cos, rotary_sin: shapes differ, {tables[0].shape} and "
                         f"{tables[1].shape}")
    return tables


def _rotated(x, bhnd, rope, positions):
    """A rotated copy of x (B, N, H, D): float16 and bfloat16 stay so (rotated
    in float32, rounded once), other dtypes become float32. bhnd(copy) gives
    the (B, H', N', D) view whose row n' of entry b sits at position
    positions[b] + n'."""
    r = np.array(T.floating(x, "rotary"), order="C")
    err = new_error()
    check(lib.attn_rope_apply(C.byref(rope), C.byref(T.view(bhnd(r), "rotary")),
                              positions.ctypes.data_as(C.POINTER(C.c_int64)), err), err)
    return r


def with_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                 cache_batch_idx, cache_leftpad, block_table, softmax_scale, causal, window,
                 softcap, rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse,
                 precision="exact"):
    if integer(num_splits, "num_splits") < 0:
        raise ValueError(f"num_splits: must be >= 0, got {num_splits}")
    # num_splits is a GPU scheduling hint: attn splits by its own rule, and
    # the result does not depend on it.
    torch_out = _is_torch(q)
    qa = _array(q, "q")
    kc, vc = _array(k_cache, "k_cache", k is not None), _array(v_cache, "v_cache", v is not None)
    if (k is None) != (v is None):
        raise ValueError("k, v: give both new keys and new values, or neither")
    ka, va = _array(k, "k"), _array(v, "v")
    for a, name in ((qa, "q"), (kc, "k_cache"), (vc, "v_cache"), (ka, "k"), (va, "v")):
        if a is not None and a.ndim != 4:
            raise ValueError(f"{name}: expected 4 dimensions, got shape {a.shape}")
    B, Sq, H = qa.shape[:3]
    new = 0 if ka is None else ka.shape[1]
    if ka is not None and (ka.shape[0] != B or va.shape[:2] != ka.shape[:2]):
        raise ValueError(f"k, v: expected ({B}, seqlen_new, ...), got {ka.shape} and "
                         f"{va.shape}")
    paged = block_table is not None
    if paged:
        table = _array(block_table, "block_table")
        if table.ndim != 2 or table.shape[0] != B or table.dtype.kind not in "iu":
            raise ValueError(f"block_table: expected an integer ({B}, max_blocks) array, got "
                             f"{table.dtype} {table.shape}")
        for arg, name in ((cache_batch_idx, "cache_batch_idx"), (cache_leftpad, "cache_leftpad")):
            if arg is not None:
                raise NotImplementedError(f"{name}: not supported with a paged cache "
                                          "(block_table)")
        page = kc.shape[1]
        capacity = table.shape[1] * page
    else:
        capacity = kc.shape[1]
    seqlens = _index_vector(cache_seqlens, "cache_seqlens", B)
    if seqlens is None:  # flash-attn: the whole cache
        seqlens = np.full(B, capacity - new, np.int64)
    rows = _index_vector(cache_batch_idx, "cache_batch_idx", B)
    if rows is None:
        rows = np.arange(B)
    elif (rows >= kc.shape[0]).any():
        raise ValueError(f"cache_batch_idx: entries must be < {kc.shape[0]} (the cache's batch)")
    start = _index_vector(cache_leftpad, "cache_leftpad", B)
    if start is None:
        start = np.zeros(B, np.int64)
    ends = seqlens + new
    if (ends > capacity).any():
        b = int(np.argmax(ends > capacity))
        raise ValueError(f"cache_seqlens: entry {b} holds {int(seqlens[b])} tokens, "
                         f"{new} more exceed the cache's {capacity}")
    if (start > seqlens).any():
        raise ValueError("cache_leftpad: an entry starts after its cache_seqlens")
    if rotary_cos is not None or rotary_sin is not None:
        if ka is not None and ka.shape[3] != qa.shape[3]:
            raise ValueError(f"k: headdim {ka.shape[3]} differs from q's {qa.shape[3]}")
        cos, sin = _rotary_tables(rotary_cos, rotary_sin, ka, qa.shape[3])
        # flash-attn: with causal or a local window (a side shorter than the
        # cache) query i sits at cache_seqlens + i, else every query at
        # cache_seqlens; new key t at cache_seqlens + t (cache_leftpad does
        # not shift positions)
        local = window is not None and any(0 <= w < capacity for w in window)
        spread = causal or local
        positions = np.ascontiguousarray(seqlens, np.int64)
        last = int(positions.max(initial=0)) + max(new, Sq if spread else 1) - 1
        if cos.shape[0] <= last:
            raise ValueError(f"rotary_cos, rotary_sin: {cos.shape[0]} positions, position "
                             f"{last} is needed")
        cos_view, sin_view = T.view(cos, "rotary_cos"), T.view(sin, "rotary_sin")
        rope = S.attn_rope(S.ROPE_GPTJ if rotary_interleaved else S.ROPE_NEOX,
                           2 * cos.shape[1], 0.0, 0.0, C.pointer(cos_view), C.pointer(sin_view))
        qa = _rotated(qa, (lambda r: r.swapaxes(1, 2)) if spread else
                      (lambda r: r.reshape(B, Sq * H, 1, r.shape[3])), rope, positions)
        ka = _rotated(ka, lambda r: r.swapaxes(1, 2), rope, positions)
    if ka is not None:
        ka, va = _stored(ka, kc, "k"), _stored(va, vc, "v")
    slopes = None if alibi_slopes is None else np.asarray(_array(alibi_slopes, "alibi_slopes"))

    def keys(b):
        """Entry b's keys and values (n, Hkv, D) after the append."""
        n = int(ends[b])
        if not paged:
            r = int(rows[b])
            if new:
                kc[r, seqlens[b]:n] = ka[b]
                vc[r, seqlens[b]:n] = va[b]
            return kc[r, start[b]:n], vc[r, start[b]:n]
        blocks = table[b, :-(-n // page)].astype(np.int64)
        if (blocks < 0).any() or (blocks >= kc.shape[0]).any():
            raise ValueError(f"block_table: entry {b} names blocks outside [0, {kc.shape[0]})")
        if new:
            pos = np.arange(seqlens[b], n)
            kc[blocks[pos // page], pos % page] = ka[b]
            vc[blocks[pos // page], pos % page] = va[b]
        if len(blocks) and (np.diff(blocks) == 1).all():  # consecutive: a view
            first = int(blocks[0])
            return (kc[first:first + len(blocks)].reshape((-1,) + kc.shape[2:])[:n],
                    vc[first:first + len(blocks)].reshape((-1,) + vc.shape[2:])[:n])
        return (kc[blocks].reshape((-1,) + kc.shape[2:])[:n],
                vc[blocks].reshape((-1,) + vc.shape[2:])[:n])

    qa = T.floating(qa, "q")
    out = np.empty((B, Sq, H, vc.shape[3]), qa.dtype if qa.dtype.itemsize == 2 else np.float32)
    lse = np.empty((B, H, Sq), np.float32)
    # one library call per run of entries with the same keys' extent in
    # consecutive cache rows (all of them, in the usual decode step)
    b = 0
    while b < B:
        e = b + 1
        if not paged:
            while (e < B and rows[e] == rows[e - 1] + 1 and ends[e] == ends[b] and
                   start[e] == start[b]):
                e += 1
        pairs = [keys(x) for x in range(b, e)]
        if not paged and e - b > 1:
            r0 = int(rows[b])
            kk = kc[r0:r0 + e - b, start[b]:ends[b]]
            vv = vc[r0:r0 + e - b, start[b]:ends[b]]
        else:
            kk, vv = pairs[0][0][None], pairs[0][1][None]
        sl = slopes[b:e] if slopes is not None and slopes.ndim == 2 else slopes
        _, lse_part = _sdpa(qa[b:e].swapaxes(1, 2), kk.swapaxes(1, 2), vv.swapaxes(1, 2), None,
                            0.0, causal, softmax_scale, True, causal_alignment="bottom_right",
                            window=window, softcap=softcap, alibi_slopes=sl, return_lse=True,
                            out=out[b:e].swapaxes(1, 2), precision=precision)
        lse[b:e] = lse_part
        b = e
    if torch_out:
        torch = _torch()
        out = (torch.from_numpy(out.view(np.int16)).view(torch.bfloat16) if T.is_bf16(out)
               else torch.from_numpy(out))
        lse = torch.from_numpy(lse)
    return (out, lse) if return_softmax_lse else out
