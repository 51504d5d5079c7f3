"""attn.torch.scaled_dot_product_attention: an autograd Function whose
gradients match torch's (float64 reference math) and finite differences."""
import numpy as np
import pytest

from reference import assert_close_as_torch, sdpa


@pytest.fixture(scope="module")
def at(torch):
    import attn.torch
    return attn.torch


CASES = [  # (q shape, kv heads, S, Dv, mask kind, causal, gqa)
    ((2, 4, 9, 16), 4, 13, 8, "bool", "top_left", False),
    ((1, 6, 17, 32), 2, 11, 32, "float", "bottom_right", True),
    ((3, 5, 8), 3, 8, 8, None, "top_left", False),
    ((2, 8, 33, 64), 1, 40, 16, "bool", None, True),
    ((7, 12), None, 5, 3, "float", "bottom_right", False),
]


def make(torch, case, dtype, seed):
    qshape, hkv, S, Dv, mask_kind, causal, gqa = case
    g = torch.Generator().manual_seed(seed)
    lead = qshape[:-3] + (hkv,) if hkv else qshape[:-2]
    L, D = qshape[-2:]
    q = torch.randn(qshape, generator=g, dtype=torch.float64)
    k = torch.randn(lead + (S, D), generator=g, dtype=torch.float64)
    v = torch.randn(lead + (S, Dv), generator=g, dtype=torch.float64)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(L, S, generator=g) < 0.8
    elif mask_kind == "float":
        mask = torch.randn(L, S, generator=g, dtype=torch.float64)
    return [x.to(dtype).requires_grad_() for x in (q, k, v)], mask, causal, gqa


@pytest.mark.parametrize("case", CASES)
def test_function_gradients_match_torch(torch, at, case):
    (q, k, v), mask, causal, gqa = make(torch, case, torch.float32, 0)
    kw = dict(is_causal=causal is not None, causal_alignment=causal or "top_left")
    out = at.scaled_dot_product_attention(q, k, v, mask, enable_gqa=gqa, **kw)
    grad = torch.randn_like(out)
    (out * grad).sum().backward()

    def reference(dtype):
        (rq, rk, rv), *_ = make(torch, case, dtype, 0)
        m = mask if mask is None or mask.dtype == torch.bool else mask.to(dtype)
        o = sdpa(torch, rq, rk, rv, m, kw["is_causal"], kw["causal_alignment"],
                 enable_gqa=gqa)[0]
        (o * grad.to(dtype)).sum().backward()
        return [o.detach().numpy()] + [x.grad.numpy() for x in (rq, rk, rv)]

    r64, r32 = reference(torch.float64), reference(torch.float32)
    ours = [out.detach().numpy()] + [x.grad.numpy() for x in (q, k, v)]
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), ours, r64, r32):
        assert a.shape == b.shape, name
        assert_close_as_torch(a, b, c, floor=1e-5, what=name)


def test_gradcheck_through_float32(torch, at):
    """torch.autograd.gradcheck on float64 leaves (cast to float32 inside):
    attn's analytic gradient against finite differences of attn itself."""
    (q, k, v), mask, *_ = make(torch, CASES[0], torch.float64, 1)
    q, k, v = (x.detach()[:1, :2, :5, :6].clone().requires_grad_() for x in (q, k, v))
    f = lambda a, b, c: at.scaled_dot_product_attention(a, b, c, is_causal=True)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-3, atol=2e-3, rtol=2e-2)


@pytest.mark.parametrize("causal", ["top_left", "bottom_right"])
def test_directional_derivatives_match_float64_finite_differences(torch, at, causal):
    """d/dt <w, attention(x + t·u)> at t = 0 from attn's backward equals the
    central difference of the float64 reference."""
    (q, k, v), mask, *_ = make(torch, CASES[1], torch.float64, 2)
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(q.shape[:-1] + (v.shape[-1],), generator=gen, dtype=torch.float64)
    dirs = [torch.randn(x.shape, generator=gen, dtype=torch.float64) for x in (q, k, v)]
    kw = dict(is_causal=True, causal_alignment=causal, enable_gqa=True)
    ins = [x.detach().float().requires_grad_() for x in (q, k, v)]
    (at.scaled_dot_product_attention(*ins, mask, **kw) * w.float()).sum().backward()
    analytic = sum(float((x.grad.double() * d).sum()) for x, d in zip(ins, dirs))

    def f(t):
        args = [(x.detach() + t * d) for x, d in zip((q, k, v), dirs)]
        return float((sdpa(torch, *args, mask, True, causal, enable_gqa=True)[0] * w).sum())

    h = 1e-5
    numeric = (f(h) - f(-h)) / (2 * h)
    assert abs(analytic - numeric) <= 1e-4 * max(1.0, abs(numeric)), (analytic, numeric)


def test_other_dtypes_keep_their_dtype_and_gradients(torch, at):
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    out = at.scaled_dot_product_attention(q, q, q)
    assert out.dtype == torch.float64
    out.sum().backward()
    assert q.grad.dtype == torch.float64 and torch.isfinite(q.grad).all()


def test_lse_and_weights_outputs(torch, at):
    q = torch.randn(2, 3, 5, 8)
    out, lse, w = at.scaled_dot_product_attention(q, q, q, return_lse=True, need_weights=True)
    ref_out, ref_lse, ref_w = sdpa(torch, q.double(), q.double(), q.double())
    assert torch.allclose(out.double(), ref_out, atol=1e-5)
    assert torch.allclose(lse.double(), ref_lse, atol=1e-5)
    assert torch.allclose(w.double(), ref_w, atol=1e-6)
    assert not lse.requires_grad and not w.requires_grad


def test_only_the_needed_gradients_are_computed(torch, at, monkeypatch):
    from attn import _fast, _lib
    asked = {}
    real, real_fast = _lib.lib.attn_sdpa_backward, _fast._sdpa_backward

    def spy(*args):
        asked["grads"] = tuple(a is not None for a in args[6:9])  # dq, dk, dv
        return real(*args)

    def spy_fast(*args):  # the short road
        asked["grads"] = tuple(a is not None for a in args[6:9])
        return real_fast(*args)

    monkeypatch.setattr(_lib.lib, "attn_sdpa_backward", spy)
    monkeypatch.setattr(_fast, "_sdpa_backward", spy_fast)
    q = torch.randn(1, 1, 3, 4, requires_grad=True)
    kv = torch.randn(1, 1, 3, 4)
    for mask in (None, torch.ones(3, 3, dtype=torch.bool)):  # the short road and the other
        asked.clear()
        q.grad = None
        at.scaled_dot_product_attention(q, kv, kv, mask).sum().backward()
        assert asked["grads"] == (True, False, False) and q.grad is not None
