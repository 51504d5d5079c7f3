"""precision="bf16" on the NumPy, torch and flash_attn surfaces reaches the
library's bfloat16 products (README "bfloat16 products") and is held to its
contract there: against a float64 oracle on the same bfloat16 inputs, the
largest error in O, the LSE, dQ, dK and dV is at most twice that of a plain
bfloat16 implementation (bfloat16 matmul operands, float32 accumulation and
softmax, P rounded to bfloat16, outputs rounded to bfloat16) plus 2^-13 of
the tensor's largest magnitude. precision="exact" (the default) keeps the
float32 results."""
import math

import numpy as np
import pytest

import attn
from attn.flash_attn import flash_attn_func, flash_attn_varlen_func
from reference import sdpa

B, H, L, D = 1, 2, 80, 32  # more query rows than a decoding shape (which keeps float32)


def b16(torch, x):
    return x.to(torch.bfloat16).float()


def inputs(torch, rng):
    """q, k, v, dout: float32 tensors holding bfloat16 values."""
    return [b16(torch, torch.tensor(rng.standard_normal((B, H, L, D)) * s, dtype=torch.float32))
            for s in (1.5, 1.5, 1.0, 1.0)]


def plain_bf16(torch, q, k, v, dout, causal):
    """(out, lse, dq, dk, dv) of the plain bfloat16 implementation."""
    scale = 1 / math.sqrt(D)
    s = (q @ k.transpose(-2, -1)) * scale  # bfloat16 operands: exact products, float32 sums
    if causal:
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -math.inf)
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    p = e / z
    lse = (m + torch.log(z)).squeeze(-1)
    pb = b16(torch, p)
    out = b16(torch, pb @ v)
    dp = dout @ v.transpose(-2, -1)
    ds = b16(torch, p * (dp - (p * dp).sum(-1, keepdim=True)))
    dq = b16(torch, scale * (ds @ k))
    dk = b16(torch, scale * (ds.transpose(-2, -1) @ q))
    dv = b16(torch, pb.transpose(-2, -1) @ dout)
    return out, lse, dq, dk, dv


def oracle(torch, q, k, v, dout, causal):
    """(out, lse, dq, dk, dv) in float64."""
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    out, lse, _ = sdpa(torch, q64, k64, v64, is_causal=causal)
    out.backward(dout.double())
    return [t.detach() for t in (out, lse, q64.grad, k64.grad, v64.grad)]


def assert_within_contract(torch, ours, plain, ref):
    for name, a, p, r in zip(("out", "lse", "dq", "dk", "dv"), ours, plain, ref):
        if a is None:
            continue
        a = torch.as_tensor(np.asarray(a)).double()
        err, base = (a - r).abs().max().item(), (p.double() - r).abs().max().item()
        allowed = 2 * base + 2.0 ** -13 * r.abs().max().item()
        assert err <= allowed, f"{name}: error {err:.3g} beyond {allowed:.3g} (plain {base:.3g})"


def differs_when_engine(exact, bf16):
    """Where the CPU has a bfloat16 engine the two precisions differ; where it
    has none (attn.engine() == "f32") a bf16 call is the exact one."""
    same = np.array_equal(np.asarray(exact), np.asarray(bf16))
    assert same == (attn.engine() == "f32"), f"engine {attn.engine()}: results same={same}"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("road", ["short", "general"])
def test_torch_surface_bf16_contract(torch, rng, causal, road):
    import attn.torch  # noqa: F401 (after the torch fixture: skipped without torch)
    q, k, v, dout = inputs(torch, rng)
    mask = None if road == "short" else torch.ones(L, L, dtype=torch.bool)  # the general road
    results = {}
    for precision in ("exact", "bf16"):
        tq, tk, tv = (t.clone().requires_grad_() for t in (q, k, v))
        out, lse = attn.torch.scaled_dot_product_attention(
            tq, tk, tv, mask, is_causal=causal, return_lse=True, precision=precision)
        out.backward(dout)
        results[precision] = [x.detach() for x in (out, lse, tq.grad, tk.grad, tv.grad)]
    ref = oracle(torch, q, k, v, dout, causal)
    assert_within_contract(torch, results["bf16"], plain_bf16(torch, q, k, v, dout, causal), ref)
    for exact, bf16 in zip(results["exact"], results["bf16"]):
        if exact is not results["exact"][1]:  # the LSE may agree (float32 softmax either way)
            differs_when_engine(exact, bf16)
    # exact stays within float32 accuracy of the oracle
    np.testing.assert_allclose(results["exact"][0].numpy(), ref[0].numpy(), atol=2e-5, rtol=1e-4)


def test_numpy_and_flash_attn_surfaces_bf16_contract(torch, rng):
    q, k, v, dout = inputs(torch, rng)
    qn, kn, vn, dn = (t.numpy() for t in (q, k, v, dout))
    out, lse = attn.scaled_dot_product_attention(qn, kn, vn, is_causal=True, return_lse=True,
                                                 precision="bf16")
    grads = attn.scaled_dot_product_attention_backward(dn, qn, kn, vn, is_causal=True,
                                                       precision="bf16")
    plain = plain_bf16(torch, q, k, v, dout, True)
    ref = oracle(torch, q, k, v, dout, True)
    assert_within_contract(torch, (out, lse) + tuple(grads), plain, ref)
    differs_when_engine(attn.scaled_dot_product_attention(qn, kn, vn, is_causal=True), out)
    # flash-attn's layout (B, N, H, D), NumPy and torch: the same contract
    bnhd = [np.ascontiguousarray(a.swapaxes(1, 2)) for a in (qn, kn, vn)]
    fa = flash_attn_func(*bnhd, causal=True, precision="bf16").swapaxes(1, 2)
    assert_within_contract(torch, (fa,), plain, ref)
    differs_when_engine(flash_attn_func(*bnhd, causal=True).swapaxes(1, 2), fa)
    ft = flash_attn_func(*(torch.from_numpy(a) for a in bnhd), causal=True, precision="bf16")
    np.testing.assert_array_equal(ft.numpy().swapaxes(1, 2), fa)
    # varlen: one sequence per batch entry and head layout (total, H, D)
    packed = [a[0].swapaxes(0, 1).copy() for a in (qn, kn, vn)]
    cu = np.array([0, L], np.int32)
    fv = flash_attn_varlen_func(*packed, cu, cu, L, L, causal=True, precision="bf16")
    assert_within_contract(torch, (fv.swapaxes(0, 1)[None],), plain, ref)


def test_precision_is_checked(rng):
    q = rng.standard_normal((1, 1, 4, 8)).astype(np.float32)
    for bad in ("bfloat16", "fp32", None, 1):
        with pytest.raises(ValueError, match="precision: must be 'exact' or 'bf16'"):
            attn.scaled_dot_product_attention(q, q, q, precision=bad)
