"""attn.flash_attn (flash-attn's calls) and attn.flashinfer (merge_state[s]):
against a float64 torch implementation of flash-attn's documented semantics
(reference.sdpa with bottom-right causal, window, softcap, ALiBi) and against
attn's own SDPA results, on NumPy arrays and torch tensors."""
import math

import numpy as np
import pytest

import attn
from attn.flash_attn import (flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache,
                             get_alibi_slopes)
from attn.flashinfer import merge_state, merge_states
from reference import sdpa

TOL = dict(atol=3e-5, rtol=1e-4)


def ref_bnhd(torch, q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi=None,
             scale=None):
    """flash-attn's math on (B, N, H, D) float64 tensors: (out, lse, probs)."""
    t = lambda x: x.transpose(-3, -2)  # noqa: E731
    win = None if tuple(window_size) == (-1, -1) else window_size
    out, lse, w = sdpa(torch, t(q), t(k), t(v), is_causal=causal, alignment="bottom_right",
                       scale=scale, enable_gqa=True, window=win, alibi_slopes=alibi,
                       softcap=softcap)
    return t(out), lse, w


def f64(torch, *arrays):
    return [torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in arrays]


CASES = [  # (B, Nq, Nk, H, Hk, D, causal, window, softcap, alibi)
    (2, 7, 7, 4, 4, 16, True, (-1, -1), 0.0, False),
    (1, 5, 12, 4, 2, 8, True, (3, 0), 0.0, True),
    (2, 9, 6, 6, 2, 32, False, (2, 2), 5.0, False),
    (3, 1, 20, 2, 1, 16, True, (-1, -1), 0.0, True),   # decode: one query
    (1, 12, 5, 2, 2, 8, True, (-1, -1), 0.0, False),   # more queries than keys: empty rows
]


@pytest.mark.parametrize("case", CASES)
def test_flash_attn_func_numpy(torch, rng, case):
    B, Nq, Nk, H, Hk, D, causal, win, cap, alibi = case
    q = rng.standard_normal((B, Nq, H, D)).astype(np.float32)
    k = rng.standard_normal((B, Nk, Hk, D)).astype(np.float32)
    v = rng.standard_normal((B, Nk, Hk, D)).astype(np.float32)
    slopes = get_alibi_slopes(H) if alibi else None
    out, lse, probs = flash_attn_func(q, k, v, causal=causal, window_size=win, softcap=cap,
                                      alibi_slopes=slopes, return_attn_probs=True)
    assert out.shape == (B, Nq, H, D) and out.flags.c_contiguous
    assert lse.shape == (B, H, Nq) and probs.shape == (B, H, Nq, Nk)
    want = ref_bnhd(torch, *f64(torch, q, k, v), causal, win, cap, slopes)
    np.testing.assert_allclose(out, want[0].detach().numpy(), **TOL)
    np.testing.assert_allclose(lse, want[1].detach().numpy(), **TOL)
    np.testing.assert_allclose(probs, want[2].detach().numpy(), **TOL)
    # the C results: attn's SDPA on the transposed views, bit for bit
    same = attn.scaled_dot_product_attention(
        q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2), is_causal=causal,
        causal_alignment="bottom_right", enable_gqa=True,
        window=None if win == (-1, -1) else win, softcap=cap, alibi_slopes=slopes)
    np.testing.assert_array_equal(out, same.swapaxes(1, 2))


@pytest.mark.parametrize("case", CASES)
def test_flash_attn_func_torch_autograd(torch, rng, case):
    B, Nq, Nk, H, Hk, D, causal, win, cap, alibi = case
    arrays = [rng.standard_normal(s).astype(np.float32)
              for s in ((B, Nq, H, D), (B, Nk, Hk, D), (B, Nk, Hk, D))]
    g = rng.standard_normal((B, Nq, H, D))
    q, k, v = (torch.tensor(a, requires_grad=True) for a in arrays)
    slopes = torch.from_numpy(get_alibi_slopes(H)) if alibi else None
    out = flash_attn_func(q, k, v, causal=causal, window_size=win, softcap=cap,
                          alibi_slopes=slopes)
    assert out.shape == (B, Nq, H, D) and out.is_contiguous() and out.dtype == torch.float32
    (out * torch.tensor(g, dtype=torch.float32)).sum().backward()
    rq, rk, rv = f64(torch, *arrays)
    want = ref_bnhd(torch, rq, rk, rv, causal, win, cap, slopes)[0]
    (want * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), **TOL)
    for ours, ref in ((q, rq), (k, rk), (v, rv)):
        np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), atol=1e-4, rtol=1e-4)


def test_flash_attn_func_defaults_and_errors(torch, rng):
    q = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
    a = flash_attn_func(q, q, q)
    b = flash_attn_func(q, q, q, 0.0, None, False, (-1, -1), 0.0, None, False, False)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="q: expected \\(batch, seqlen, nheads, headdim\\)"):
        flash_attn_func(q[0], q[0], q[0])
    with pytest.raises(TypeError, match="window_size\\[0\\]: expected an integer"):
        flash_attn_func(q, q, q, window_size=(1.5, 0))
    with pytest.raises(ValueError, match="window_size\\[1\\]"):
        flash_attn_func(q, q, q, window_size=(0, 2**64))
    # bfloat16 torch tensors keep their dtype
    t = torch.tensor(q).to(torch.bfloat16)
    assert flash_attn_func(t, t, t, causal=True).dtype == torch.bfloat16


# ------------------------------------------------------------------- varlen
def varlen_case(rng, lengths_q, lengths_k, H=4, Hk=2, D=16):
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lengths_k)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], H, D)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], Hk, D)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], Hk, D)).astype(np.float32)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("causal,win", [(False, (-1, -1)), (True, (-1, -1)), (True, (4, 0))])
def test_flash_attn_varlen_func(torch, rng, causal, win):
    lq, lk = [3, 1, 8, 0, 5], [6, 4, 8, 2, 5]
    q, k, v, cu_q, cu_k = varlen_case(rng, lq, lk)
    g = rng.standard_normal(q.shape)
    out, lse, probs = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk),
                                             causal=causal, window_size=win,
                                             return_attn_probs=True)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    assert probs.shape == (5, 4, max(lq), max(lk))
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    o2, lse2 = flash_attn_varlen_func(tq, tk, tv, torch.tensor(cu_q), torch.tensor(cu_k),
                                      max(lq), max(lk), causal=causal, window_size=win,
                                      return_attn_probs=True)[:2]
    np.testing.assert_array_equal(o2.detach().numpy(), out)
    (o2 * torch.tensor(g, dtype=torch.float32)).sum().backward()
    rq, rk, rv = f64(torch, q, k, v)
    for s in range(len(lq)):
        sq, sk = slice(cu_q[s], cu_q[s + 1]), slice(cu_k[s], cu_k[s + 1])
        if lq[s] == 0:
            continue
        want, wlse, wp = ref_bnhd(torch, rq[sq][None], rk[sk][None], rv[sk][None], causal, win)
        np.testing.assert_allclose(out[sq], want[0].detach().numpy(), **TOL)
        np.testing.assert_allclose(lse[:, sq], wlse[0].detach().numpy(), **TOL)
        np.testing.assert_allclose(probs[s, :, :lq[s], :lk[s]], wp[0].detach().numpy(), **TOL)
        (want[0] * torch.tensor(g[sq])).sum().backward()
    for ours, ref in ((tq, rq), (tk, rk), (tv, rv)):
        np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), atol=1e-4, rtol=1e-4)


def test_flash_attn_varlen_func_attn_probs_layout(torch, rng):
    """return_attn_probs: (out, softmax_lse (nheads, total_q), probs (batch,
    nheads, max_seqlen_q, max_seqlen_k)): each sequence's exact softmax
    weights in its top-left corner, zeros elsewhere, the same with dropout
    (weights before dropout) and on NumPy and torch."""
    lq, lk = [2, 5, 0, 3], [4, 1, 3, 6]
    q, k, v, cu_q, cu_k = varlen_case(rng, lq, lk)
    mq, mk = max(lq) + 2, max(lk) + 1  # larger than any sequence: more padding
    out, lse, probs = flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=True,
                                             return_attn_probs=True)
    assert lse.shape == (4, cu_q[-1]) and probs.shape == (4, 4, mq, mk)
    assert probs.dtype == np.float32
    rq, rk, rv = f64(torch, q, k, v)
    for s in range(len(lq)):
        corner = probs[s, :, :lq[s], :lk[s]]
        rest = probs[s].copy()
        rest[:, :lq[s], :lk[s]] = 0
        assert not rest.any(), f"sequence {s}: nonzero padding"
        if lq[s]:
            sq, sk = slice(cu_q[s], cu_q[s + 1]), slice(cu_k[s], cu_k[s + 1])
            wp = ref_bnhd(torch, rq[sq][None], rk[sk][None], rv[sk][None], True)[2]
            np.testing.assert_allclose(corner, wp[0].detach().numpy(), **TOL)
    dropped = flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, dropout_p=0.5, causal=True,
                                     return_attn_probs=True)
    np.testing.assert_array_equal(dropped[2], probs)  # before dropout
    assert not np.array_equal(dropped[0], out)
    t = flash_attn_varlen_func(*(torch.tensor(a) for a in (q, k, v, cu_q, cu_k)), mq, mk,
                               causal=True, return_attn_probs=True)
    assert all(isinstance(x, torch.Tensor) for x in t) and t[2].shape == probs.shape
    np.testing.assert_array_equal(t[2].numpy(), probs)
    np.testing.assert_array_equal(t[1].numpy(), lse)


def test_flash_attn_varlen_func_errors(rng):
    q, k, v, cu_q, cu_k = varlen_case(rng, [3, 4], [3, 4])
    with pytest.raises(ValueError, match="max_seqlen_k: 3, but a sequence has 4 tokens"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 3)
    with pytest.raises(NotImplementedError, match="block_table"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 4, block_table=np.zeros((2, 1), np.int32))


# ----------------------------------------------------------------- KV cache
def attend_ref(torch, q, keys, values, causal, **kw):
    """float64 flash-attn attention of q (Nq, H, D) over keys (n, Hk, D)."""
    out, lse, _ = ref_bnhd(torch, *f64(torch, q[None], keys[None], values[None]), causal, **kw)
    return out[0].detach().numpy(), lse[0].detach().numpy()


@pytest.mark.parametrize("causal", [False, True])
def test_kvcache_contiguous_append_and_attend(torch, rng, causal):
    B, cap, Hk, H, D, new = 3, 16, 2, 4, 8, 2
    k_cache = rng.standard_normal((B, cap, Hk, D)).astype(np.float32)
    v_cache = rng.standard_normal((B, cap, Hk, D)).astype(np.float32)
    before_k, before_v = k_cache.copy(), v_cache.copy()
    seqlens = np.array([5, 0, 9], np.int32)
    q = rng.standard_normal((B, new, H, D)).astype(np.float32)
    k = rng.standard_normal((B, new, Hk, D)).astype(np.float32)
    v = rng.standard_normal((B, new, Hk, D)).astype(np.float32)
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens,
                                       causal=causal, return_softmax_lse=True)
    for b in range(B):
        s = seqlens[b]
        np.testing.assert_array_equal(k_cache[b, s:s + new], k[b])
        np.testing.assert_array_equal(v_cache[b, s + new:], before_v[b, s + new:])
        np.testing.assert_array_equal(k_cache[b, :s], before_k[b, :s])
        want, wlse = attend_ref(torch, q[b], k_cache[b, :s + new], v_cache[b, :s + new], causal)
        np.testing.assert_allclose(out[b], want, **TOL)
        np.testing.assert_allclose(lse[b], wlse, **TOL)
        # the C result on the same keys
        same = flash_attn_func(q[b:b + 1], k_cache[b:b + 1, :s + new], v_cache[b:b + 1, :s + new],
                               causal=causal)
        np.testing.assert_allclose(out[b:b + 1], same, atol=1e-6)


def test_kvcache_equal_lengths_batch_idx_leftpad_and_torch(torch, rng):
    B, cap, Hk, H, D = 2, 10, 1, 2, 8
    k_cache = torch.tensor(rng.standard_normal((4, cap, Hk, D)), dtype=torch.float32)
    v_cache = torch.tensor(rng.standard_normal((4, cap, Hk, D)), dtype=torch.float32)
    q = torch.tensor(rng.standard_normal((B, 1, H, D)), dtype=torch.float32)
    k = torch.tensor(rng.standard_normal((B, 1, Hk, D)), dtype=torch.float32)
    v = torch.tensor(rng.standard_normal((B, 1, Hk, D)), dtype=torch.float32)
    idx = torch.tensor([3, 1], dtype=torch.int32)
    left = torch.tensor([2, 0], dtype=torch.int32)
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=6,
                                  cache_batch_idx=idx, cache_leftpad=left, causal=True)
    assert isinstance(out, torch.Tensor) and out.shape == (B, 1, H, D)
    for b, (row, lp) in enumerate(((3, 2), (1, 0))):
        assert torch.equal(k_cache[row, 6], k[b, 0])  # appended in place
        want, _ = attend_ref(torch, q[b].numpy(), k_cache[row, lp:7].numpy(),
                             v_cache[row, lp:7].numpy(), True)
        np.testing.assert_allclose(out[b].numpy(), want, **TOL)
    # no new keys, cache_seqlens None: the whole cache
    full = flash_attn_with_kvcache(q.numpy(), k_cache.numpy()[:2], v_cache.numpy()[:2])
    want, _ = attend_ref(torch, q[0].numpy(), k_cache[0].numpy(), v_cache[0].numpy(), False)
    np.testing.assert_allclose(full[0], want, **TOL)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_kvcache_16bit_torch_caches_with_batch_idx_and_leftpad(torch, rng, dtype, causal):
    """16-bit torch q and caches (flash-attn's dtypes) stay 16-bit: new keys
    are appended bit for bit (float32 ones rounded as Tensor.to rounds), the
    output has q's dtype, and it is the float64 attention of the stored
    values within the README's 16-bit bound; cache_batch_idx picks each
    entry's cache row and cache_leftpad hides the keys before it."""
    dt = getattr(torch, dtype)
    u = 2.0 ** (-8 if dtype == "bfloat16" else -11)
    B, rows_total, cap, Hk, H, D, new = 3, 5, 12, 2, 4, 16, 2
    t = lambda shape: torch.tensor(rng.standard_normal(shape), dtype=torch.float32)  # noqa
    k_cache, v_cache = t((rows_total, cap, Hk, D)).to(dt), t((rows_total, cap, Hk, D)).to(dt)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    q = t((B, new, H, D)).to(dt)
    k, v = t((B, new, Hk, D)).to(dt), t((B, new, Hk, D))  # v float32: rounded on append
    rows = torch.tensor([4, 0, 2], dtype=torch.int32)
    left = torch.tensor([3, 0, 6], dtype=torch.int32)
    seqlens = torch.tensor([7, 5, 6], dtype=torch.int32)
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens,
                                       cache_batch_idx=rows, cache_leftpad=left, causal=causal,
                                       return_softmax_lse=True)
    assert out.dtype == dt and out.shape == (B, new, H, D) and lse.dtype == torch.float32
    untouched = torch.ones(rows_total, dtype=torch.bool)
    for b in range(B):
        r, lp, s = int(rows[b]), int(left[b]), int(seqlens[b])
        untouched[r] = False
        assert torch.equal(k_cache[r, s:s + new], k[b])
        assert torch.equal(v_cache[r, s:s + new], v[b].to(dt))
        assert torch.equal(k_cache[r, :s], before_k[r, :s])
        assert torch.equal(v_cache[r, s + new:], before_v[r, s + new:])
        keys, vals = k_cache[r, lp:s + new].double(), v_cache[r, lp:s + new].double()
        want, wlse = attend_ref(torch, q[b].double().numpy(), keys.numpy(), vals.numpy(), causal)
        bound = u * (np.abs(want) + vals.abs().max().item()) + 1e-5
        err = np.abs(out[b].double().numpy() - want)
        assert (err <= bound).all(), f"entry {b}: error {err.max()} beyond the 16-bit bound"
        np.testing.assert_allclose(lse[b].numpy(), wlse, atol=1e-4, rtol=1e-4)
    assert torch.equal(k_cache[untouched], before_k[untouched])  # other rows left alone
    # the same on NumPy float16 arrays: the same bits
    if dtype == "float16":
        kc2, vc2 = before_k.numpy().copy(), before_v.numpy().copy()
        out2 = flash_attn_with_kvcache(q.numpy(), kc2, vc2, k.numpy(), v.numpy(),
                                       cache_seqlens=seqlens.numpy(),
                                       cache_batch_idx=rows.numpy(), cache_leftpad=left.numpy(),
                                       causal=causal)
        assert out2.dtype == np.float16
        np.testing.assert_array_equal(out2, out.numpy())


@pytest.mark.parametrize("shuffled", [False, True])
def test_kvcache_paged(torch, rng, shuffled):
    B, page, blocks_per, Hk, H, D, new = 2, 4, 3, 2, 2, 8, 3
    nblocks = B * blocks_per
    k_pool = rng.standard_normal((nblocks, page, Hk, D)).astype(np.float32)
    v_pool = rng.standard_normal((nblocks, page, Hk, D)).astype(np.float32)
    order = rng.permutation(nblocks) if shuffled else np.arange(nblocks)
    table = order.reshape(B, blocks_per).astype(np.int32)
    seqlens = np.array([5, 2], np.int32)
    q = rng.standard_normal((B, new, H, D)).astype(np.float32)
    k = rng.standard_normal((B, new, Hk, D)).astype(np.float32)
    v = rng.standard_normal((B, new, Hk, D)).astype(np.float32)
    out = flash_attn_with_kvcache(q, k_pool, v_pool, k, v, cache_seqlens=seqlens,
                                  block_table=table, causal=True)
    for b in range(B):
        n = seqlens[b] + new
        keys = k_pool[table[b]].reshape(-1, Hk, D)[:n]
        vals = v_pool[table[b]].reshape(-1, Hk, D)[:n]
        np.testing.assert_array_equal(keys[seqlens[b]:], k[b])
        want, _ = attend_ref(torch, q[b], keys, vals, True)
        np.testing.assert_allclose(out[b], want, **TOL)


def test_kvcache_refuses_what_it_does_not_support(rng):
    kc = np.zeros((1, 8, 1, 4), np.float32)
    q = np.zeros((1, 1, 1, 4), np.float32)
    with pytest.raises(NotImplementedError, match="cache_leftpad"):
        flash_attn_with_kvcache(q, kc, kc, cache_seqlens=1, cache_leftpad=np.zeros(1, np.int32),
                                block_table=np.zeros((1, 1), np.int32))
    with pytest.raises(ValueError, match="cache_seqlens: entry 0 holds 7 tokens, 2 more"):
        flash_attn_with_kvcache(q, kc, kc, np.zeros((1, 2, 1, 4), np.float32),
                                np.zeros((1, 2, 1, 4), np.float32), cache_seqlens=7)
    with pytest.raises(ValueError, match="k, v: give both"):
        flash_attn_with_kvcache(q, kc, kc, q, None, cache_seqlens=0)


# ------------------------------------------------------ KV cache with rotary
def rotate_ref(torch, x, cos, sin, positions, interleaved):
    """flash-attn's rotary embedding in float64: x (N, H, D), row n at
    positions[n]; pairs (2i, 2i + 1) interleaved, else (i, i + rotary_dim/2)."""
    x = torch.tensor(np.asarray(x, np.float64))
    c = torch.tensor(np.asarray(cos, np.float64))[positions][:, None]  # (N, 1, rd/2)
    s = torch.tensor(np.asarray(sin, np.float64))[positions][:, None]
    rd = 2 * c.shape[-1]
    first, second = (slice(0, rd, 2), slice(1, rd, 2)) if interleaved else \
        (slice(0, rd // 2), slice(rd // 2, rd))
    out = x.clone()
    out[..., first] = x[..., first] * c - x[..., second] * s
    out[..., second] = x[..., first] * s + x[..., second] * c
    return out.numpy()


def rotary_tables(rng, positions, rotary_dim):
    angle = rng.uniform(0, 2 * math.pi, (positions, rotary_dim // 2))
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [8, 16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("as_torch", [False, True])
def test_kvcache_rotary(torch, rng, interleaved, rotary_dim, causal, paged, as_torch):
    B, Hk, H, D, new, Sq, page, blocks_per = 3, 2, 4, 16, 2, 3, 4, 4
    cap = page * blocks_per
    seqlens = np.array([5, 0, 9], np.int32)  # entries at different positions
    if paged:
        table = rng.permutation(B * blocks_per).reshape(B, blocks_per).astype(np.int32)
        k_cache = rng.standard_normal((B * blocks_per, page, Hk, D)).astype(np.float32)
    else:
        table = None
        k_cache = rng.standard_normal((B, cap, Hk, D)).astype(np.float32)
    v_cache = rng.standard_normal(k_cache.shape).astype(np.float32)
    before_k = k_cache.copy()
    q = rng.standard_normal((B, Sq, H, D)).astype(np.float32)
    k = rng.standard_normal((B, new, Hk, D)).astype(np.float32)
    v = rng.standard_normal((B, new, Hk, D)).astype(np.float32)
    cos, sin = rotary_tables(rng, cap, rotary_dim)
    args = [q, k_cache, v_cache, k, v, cos, sin]
    if as_torch:
        args = [torch.from_numpy(a) for a in args]
        if rotary_dim == 8:  # bfloat16 tables (flash-attn's dtype for bfloat16 q), widened
            args[5], args[6] = args[5].bfloat16(), args[6].bfloat16()
            cos, sin = (a.float().numpy() for a in args[5:])
    q_in, k_in = (np.array(np.asarray(args[i])) for i in (0, 3))  # copies
    out = flash_attn_with_kvcache(*args[:5], rotary_cos=args[5], rotary_sin=args[6],
                                  cache_seqlens=seqlens, block_table=table, causal=causal,
                                  rotary_interleaved=interleaved)
    assert isinstance(out, torch.Tensor) == as_torch
    out = np.asarray(out)
    # the caller's q and k are left alone
    np.testing.assert_array_equal(np.asarray(args[0]), np.asarray(q_in))
    np.testing.assert_array_equal(np.asarray(args[3]), np.asarray(k_in))
    for b in range(B):
        s, n = int(seqlens[b]), int(seqlens[b]) + new
        if paged:
            keys = k_cache[table[b]].reshape(-1, Hk, D)[:n]
            old = before_k[table[b]].reshape(-1, Hk, D)[:s]
            vals = v_cache[table[b]].reshape(-1, Hk, D)[:n]
        else:
            keys, old, vals = k_cache[b, :n], before_k[b, :s], v_cache[b, :n]
        k_rot = rotate_ref(torch, k[b], cos, sin, np.arange(s, n), interleaved)
        np.testing.assert_allclose(keys[s:], k_rot, atol=1e-6, rtol=1e-6)
        np.testing.assert_array_equal(keys[:s], old)  # earlier keys untouched
        np.testing.assert_array_equal(keys[s:, :, rotary_dim:], k[b, :, :, rotary_dim:])
        np.testing.assert_array_equal(vals[s:], v[b])  # values are not rotated
        # flash-attn: causal queries at consecutive positions, else all at s
        q_pos = s + np.arange(Sq) if causal else np.full(Sq, s)
        q_rot = rotate_ref(torch, q[b], cos, sin, q_pos, interleaved)
        want, _ = attend_ref(torch, q_rot, np.concatenate([old, k_rot]), vals, causal)
        np.testing.assert_allclose(out[b], want, **TOL)


@pytest.mark.parametrize("window_size,spread", [((2, -1), True), ((-1, 1), True),
                                                ((16, -1), False), ((20, 30), False)])
def test_kvcache_rotary_local_window_positions(torch, rng, window_size, spread):
    """flash-attn treats a window side at least the cache's length as
    unbounded: only a window that can cut gives queries consecutive positions."""
    B, cap, Hk, H, D, Sq = 1, 16, 1, 2, 16, 4
    k_cache = rng.standard_normal((B, cap, Hk, D)).astype(np.float32)
    v_cache = rng.standard_normal((B, cap, Hk, D)).astype(np.float32)
    q = rng.standard_normal((B, Sq, H, D)).astype(np.float32)
    k = rng.standard_normal((B, 1, Hk, D)).astype(np.float32)
    v = rng.standard_normal((B, 1, Hk, D)).astype(np.float32)
    cos, sin = rotary_tables(rng, cap, D)
    s = 6
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=s,
                                  window_size=window_size, rotary_interleaved=False)
    q_pos = s + np.arange(Sq) if spread else np.full(Sq, s)
    q_rot = rotate_ref(torch, q[0], cos, sin, q_pos, False)
    want, _ = attend_ref(torch, q_rot, k_cache[0, :s + 1], v_cache[0, :s + 1], False,
                         window_size=window_size)
    np.testing.assert_allclose(out[0], want, **TOL)


def test_kvcache_rotary_leftpad_and_batch_idx_keep_absolute_positions(torch, rng):
    """cache_leftpad moves where an entry's keys start, not its positions:
    new keys sit at cache_seqlens + t, as flash-attn's kernel reads cos/sin."""
    B, cap, Hk, H, D, rd = 2, 12, 1, 2, 16, 16
    k_cache = rng.standard_normal((3, cap, Hk, D)).astype(np.float32)
    v_cache = rng.standard_normal((3, cap, Hk, D)).astype(np.float32)
    before = k_cache.copy()
    q = rng.standard_normal((B, 1, H, D)).astype(np.float32)
    k = rng.standard_normal((B, 1, Hk, D)).astype(np.float32)
    v = rng.standard_normal((B, 1, Hk, D)).astype(np.float32)
    cos, sin = rotary_tables(rng, cap, rd)
    rows, left, seqlens = np.array([2, 0]), np.array([3, 1], np.int32), np.array([7, 4], np.int32)
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=seqlens,
                                  cache_batch_idx=rows.astype(np.int32), cache_leftpad=left,
                                  causal=True)
    for b in range(B):
        r, lp, s = rows[b], left[b], seqlens[b]
        k_rot = rotate_ref(torch, k[b], cos, sin, np.array([s]), True)
        np.testing.assert_allclose(k_cache[r, s:s + 1], k_rot, atol=1e-6, rtol=1e-6)
        q_rot = rotate_ref(torch, q[b], cos, sin, np.array([s]), True)
        want, _ = attend_ref(torch, q_rot, np.concatenate([before[r, lp:s], k_rot]),
                             v_cache[r, lp:s + 1], True)
        np.testing.assert_allclose(out[b], want, **TOL)


def test_kvcache_rotary_refuses_bad_arguments(rng):
    kc = np.zeros((1, 8, 1, 16), np.float32)
    q = np.zeros((1, 2, 1, 16), np.float32)
    k = np.zeros((1, 1, 1, 16), np.float32)
    cos = np.ones((8, 4), np.float32)
    call = lambda *a, **kw: flash_attn_with_kvcache(q, kc.copy(), kc.copy(), *a,  # noqa: E731
                                                     cache_seqlens=0, **kw)
    with pytest.raises(ValueError, match="rotary_cos, rotary_sin: give both"):
        call(k, k, cos)
    with pytest.raises(ValueError, match="rotary_cos, rotary_sin: give both"):
        call(k, k, None, cos)
    with pytest.raises(ValueError, match="rotary_cos, rotary_sin: only applicable with new"):
        call(None, None, cos, cos)
    with pytest.raises(TypeError, match="rotary_sin: expected a floating-point table"):
        call(k, k, cos, np.ones((8, 4), np.int32))
    with pytest.raises(ValueError, match=r"rotary_cos: expected \(seqlen_ro, rotary_dim / 2\)"):
        call(k, k, np.ones((8, 9), np.float32), np.ones((8, 9), np.float32))
    with pytest.raises(ValueError, match=r"rotary_cos: expected \(seqlen_ro"):
        call(k, k, np.ones(8, np.float32), np.ones(8, np.float32))
    with pytest.raises(ValueError, match="rotary_cos, rotary_sin: shapes differ"):
        call(k, k, cos, np.ones((8, 2), np.float32))
    with pytest.raises(ValueError, match="k: headdim 8 differs"):
        call(np.zeros((1, 1, 1, 8), np.float32), np.zeros((1, 1, 1, 8), np.float32), cos, cos)
    # causal: two queries from position 7 need position 8
    with pytest.raises(ValueError, match="rotary_cos, rotary_sin: 8 positions, position 8"):
        flash_attn_with_kvcache(q, kc.copy(), kc.copy(), k, k, cos, cos, cache_seqlens=7,
                                causal=True)
    flash_attn_with_kvcache(q, kc.copy(), kc.copy(), k, k, cos, cos, cache_seqlens=7)
    empty = flash_attn_with_kvcache(q[:0], kc[:0], kc[:0], k[:0], k[:0], cos, cos,
                                    cache_seqlens=np.zeros(0, np.int32))
    assert empty.shape == (0, 2, 1, 16)


# --------------------------------------------------------- merges and ALiBi
def test_merge_state_matches_attention_over_the_union(rng):
    q = rng.standard_normal((1, 6, 2, 8)).astype(np.float32)  # (B, N, H, D)
    k = rng.standard_normal((1, 10, 2, 8)).astype(np.float32)
    v = rng.standard_normal((1, 10, 2, 8)).astype(np.float32)
    halves = [flash_attn_func(q, k[:, s], v[:, s], return_attn_probs=True)[:2]
              for s in (slice(0, 4), slice(4, 10))]
    whole = flash_attn_func(q, k, v, return_attn_probs=True)[:2]
    # flash-attn's natural-log lse (B, H, N) as FlashInfer's (N, H) states
    st = [(o[0], lse[0].T) for o, lse in halves]
    V, S = merge_state(st[0][0], st[0][1], st[1][0], st[1][1], log2=False)
    np.testing.assert_allclose(V, whole[0][0], atol=1e-6)
    np.testing.assert_allclose(S, whole[1][0].T, atol=1e-6)
    # FlashInfer's base-2 LSE
    V2, S2 = merge_state(st[0][0], st[0][1] / math.log(2), st[1][0], st[1][1] / math.log(2))
    np.testing.assert_allclose(V2, V, atol=1e-6)
    np.testing.assert_allclose(S2, S / math.log(2), atol=1e-5)


def test_merge_states_against_float64(torch, rng):
    v = rng.standard_normal((5, 4, 3, 8)).astype(np.float32)
    s = (3 * rng.standard_normal((5, 4, 3))).astype(np.float32)
    s[0, 2] = -np.inf  # a state that saw no key
    V, S = merge_states(torch.tensor(v), torch.tensor(s))
    assert isinstance(V, torch.Tensor) and V.shape == (5, 3, 8) and S.shape == (5, 3)
    w = np.exp2(s.astype(np.float64))
    np.testing.assert_allclose(V.numpy(), (w[..., None] * v).sum(1) / w.sum(1)[..., None],
                               atol=1e-5)
    np.testing.assert_allclose(S.numpy(), np.log2(w.sum(1)), atol=1e-5)
    with pytest.raises(ValueError, match="v, s: expected"):
        merge_states(v[0], s[0])


@pytest.mark.parametrize("base", [0.0, 1e3, 3e4, -3e4])
def test_merge_state_log2_far_from_zero(base):
    # the weights depend on s_a - s_b only: as exact at |s| = 3e4 as at 0
    sa, sb = np.float32([[base + 0.25]]), np.float32([[base]])
    v, s = merge_state(np.ones((1, 1, 1), np.float32), sa, np.zeros((1, 1, 1), np.float32), sb)
    d = float(sa[0, 0]) - float(sb[0, 0])
    want = 2 ** d / (1 + 2 ** d)
    assert abs(v.item() - want) <= 2 * abs(np.spacing(np.float32(want)))
    want_s = float(sb[0, 0]) + math.log2(1 + 2 ** d)
    assert abs(s.item() - want_s) <= abs(np.spacing(np.float32(want_s)))


def test_alibi_slopes_helper(torch):
    want = [2 ** (-8 * (h + 1) / 8) for h in range(8)]
    np.testing.assert_allclose(get_alibi_slopes(8), want, rtol=1e-6)
    import attn.torch
    assert torch.equal(attn.torch.alibi_slopes(8), torch.from_numpy(get_alibi_slopes(8)))


@pytest.mark.parametrize("shape_b", [(2, 3, 4), (4, 2, 4), (4, 3, 5)])
def test_merge_state_names_mismatched_states(shape_b):
    # each state is consistent in itself; the two differ: one line naming them
    va, sa = np.zeros((4, 3, 4), np.float32), np.zeros((4, 3), np.float32)
    vb, sb = np.zeros(shape_b, np.float32), np.zeros(shape_b[:2], np.float32)
    with pytest.raises(ValueError, match="v_a, v_b: the two states must have one shape"):
        merge_state(va, sa, vb, sb)
