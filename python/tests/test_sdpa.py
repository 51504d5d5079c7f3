"""attn.scaled_dot_product_attention and its backward against torch: the
float64 reference, with torch's own float32 error as the yardstick."""
import numpy as np
import pytest

import attn
from reference import assert_close_as_torch, max_error, sdpa


def random_case(seed):
    """A random SDPA problem: shapes, GQA, mask, causal alignment, scale."""
    r = np.random.default_rng(seed)
    ndim = int(r.choice([2, 3, 4, 4, 5]))
    gqa = ndim >= 3 and r.random() < 0.4
    hkv = int(r.integers(1, 4))
    hq = hkv * int(r.integers(2, 4)) if gqa else hkv
    batch = tuple(int(n) for n in r.integers(1, 3, size=max(ndim - 3, 0)))
    L, S = int(r.integers(1, 40)), int(r.integers(1, 40))
    D, Dv = int(r.integers(1, 70)), int(r.integers(1, 40))
    head = lambda h: (h,) if ndim >= 3 else ()  # noqa: E731
    qs, ks, vs = batch + head(hq) + (L, D), batch + head(hkv) + (S, D), batch + head(hkv) + (S, Dv)
    dtype = r.choice([np.float32, np.float64])
    q, k, v = (r.standard_normal(s).astype(dtype) for s in (qs, ks, vs))
    mask_kind = r.choice(["none", "bool2d", "bool_pad", "float_heads"])
    full = batch + head(hq)
    if mask_kind == "bool2d":
        mask = r.random((L, S)) < 0.8
    elif mask_kind == "bool_pad":  # key padding, broadcast over heads and queries
        mask = r.random(batch + ((1, 1) if ndim >= 3 else (1,)) + (S,)) < 0.7
    elif mask_kind == "float_heads":
        mask = r.standard_normal(full + (L, S)).astype(np.float32)
        mask[r.random(mask.shape) < 0.2] = -np.inf
    else:
        mask = None
    causal = r.choice(["none", "top_left", "bottom_right"])
    scale = [None, 0.3, 1.7, 0.0][int(r.integers(0, 4))]
    return dict(q=q, k=k, v=v, attn_mask=mask, causal=causal, scale=scale, enable_gqa=gqa)


def run_reference(torch, case, dtype, grad_out=None):
    t = lambda a: torch.tensor(np.asarray(a, dtype=dtype), requires_grad=True)  # noqa: E731
    q, k, v = t(case["q"]), t(case["k"]), t(case["v"])
    mask = case["attn_mask"]
    if mask is not None:
        mask = torch.tensor(mask) if mask.dtype == np.bool_ else torch.tensor(mask.astype(dtype))
    out, lse, w = sdpa(torch, q, k, v, mask, case["causal"] != "none", case["causal"],
                       case["scale"], case["enable_gqa"])
    grads = None
    if grad_out is not None:
        (out * torch.tensor(grad_out.astype(dtype))).sum().backward()
        grads = [x.grad.numpy() for x in (q, k, v)]
    return out.detach().numpy(), lse.detach().numpy(), w.detach().numpy(), grads


def call_attn(case, **kw):
    return attn.scaled_dot_product_attention(
        case["q"], case["k"], case["v"], case["attn_mask"], is_causal=case["causal"] != "none",
        causal_alignment=case["causal"] if case["causal"] != "none" else "top_left",
        scale=case["scale"], enable_gqa=case["enable_gqa"], **kw)


@pytest.mark.parametrize("seed", range(40))
def test_forward_and_backward_match_torch(torch, seed):
    case = random_case(seed)
    out, lse, w = call_attn(case, return_lse=True, need_weights=True)
    assert out.dtype == np.float32
    dout = np.random.default_rng(seed + 1000).standard_normal(out.shape)
    r64 = run_reference(torch, case, np.float64, dout)
    r32 = run_reference(torch, case, np.float32, dout)
    # torch gives NaN where a row sees nothing; attn gives 0 (and -inf LSE),
    # which is what the reference's empty-row rule encodes.
    for name, ours, ref, t32 in (("out", out, r64[0], r32[0]), ("lse", lse, r64[1], r32[1]),
                                 ("weights", w, r64[2], r32[2])):
        assert ours.shape == ref.shape, name
        assert_close_as_torch(ours, ref, t32, what=name)
    grads = attn.scaled_dot_product_attention_backward(
        dout, case["q"], case["k"], case["v"], out, lse, case["attn_mask"],
        is_causal=case["causal"] != "none",
        causal_alignment=case["causal"] if case["causal"] != "none" else "top_left",
        scale=case["scale"], enable_gqa=case["enable_gqa"])
    for name, ours, ref, t32 in zip(("dq", "dk", "dv"), grads, r64[3], r32[3]):
        assert ours.shape == ref.shape, name
        assert_close_as_torch(ours, ref, t32, floor=1e-5, what=name)


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_causal_alignments_differ_when_lengths_differ(torch, alignment):
    r = np.random.default_rng(7)
    q, k, v = r.standard_normal((1, 2, 3, 8)), r.standard_normal((1, 2, 6, 8)), \
        r.standard_normal((1, 2, 6, 8))
    w = attn.scaled_dot_product_attention(q, k, v, is_causal=True, causal_alignment=alignment,
                                          need_weights=True)[1]
    last_visible = (w[0, 0] > 0).sum(axis=-1) - 1
    expected = np.arange(3) + (3 if alignment == "bottom_right" else 0)
    np.testing.assert_array_equal(last_visible, expected)


def test_head_broadcast_without_gqa_and_batch_broadcast(torch):
    """torch broadcasts a single key head and batch dimensions of size 1."""
    r = np.random.default_rng(3)
    q = r.standard_normal((2, 3, 4, 5, 8))
    k = r.standard_normal((1, 3, 1, 6, 8))
    v = r.standard_normal((2, 1, 1, 6, 4))
    out = attn.scaled_dot_product_attention(q, k, v)
    full = lambda a, d: torch.tensor(np.broadcast_to(a, (2, 3, 4, 6, d)).copy())  # noqa: E731
    ref = sdpa(torch, torch.tensor(q), full(k, 8), full(v, 4))[0]
    assert max_error(out, ref.numpy()) < 1e-5
    g = r.standard_normal(out.shape)
    dq, dk, dv = attn.scaled_dot_product_attention_backward(g, q, k, v)
    assert dk.shape == k.shape and dv.shape == v.shape
    tk = torch.tensor(k, requires_grad=True)
    tv = torch.tensor(v, requires_grad=True)
    o = sdpa(torch, torch.tensor(q), tk.expand(2, 3, 4, 6, 8), tv.expand(2, 3, 4, 6, 4))[0]
    (o * torch.tensor(g)).sum().backward()
    assert max_error(dk, tk.grad.numpy()) < 1e-4 and max_error(dv, tv.grad.numpy()) < 1e-4


def test_fully_masked_rows_give_zero_not_nan():
    q = np.ones((1, 1, 2, 4), np.float32)
    mask = np.array([[True, True], [False, False]])
    out, lse = attn.scaled_dot_product_attention(q, q, q, mask, return_lse=True)
    assert np.all(out[0, 0, 1] == 0) and lse[0, 0, 1] == -np.inf
    dq, dk, dv = attn.scaled_dot_product_attention_backward(np.ones_like(out), q, q, q,
                                                            attn_mask=mask)
    assert np.isfinite(dq).all() and np.all(dq[0, 0, 1] == 0)


@pytest.mark.parametrize("path", ["reference", "fused"])
def test_paths_agree(path):
    r = np.random.default_rng(11)
    q, k, v = (r.standard_normal((2, 4, 33, 16)).astype(np.float32) for _ in range(3))
    auto = attn.scaled_dot_product_attention(q, k, v, is_causal=True)
    other = attn.scaled_dot_product_attention(q, k, v, is_causal=True, path=path)
    assert max_error(auto, other) < 1e-5


def test_results_do_not_depend_on_threads():
    r = np.random.default_rng(5)
    q, k, v = (r.standard_normal((1, 4, 70, 32)).astype(np.float32) for _ in range(3))
    one = attn.scaled_dot_product_attention(q, k, v, num_threads=1)
    two = attn.scaled_dot_product_attention(q, k, v, num_threads=2)
    np.testing.assert_array_equal(one, two)


def test_thread_setter():
    before = attn.get_num_threads()
    try:
        attn.set_num_threads(1)
        assert attn.get_num_threads() == 1
        with pytest.raises(ValueError, match="num_threads"):
            attn.set_num_threads(-1)
    finally:
        attn.set_num_threads(0)
    assert attn.get_num_threads() == before
