"""The gradient of a learned float attn_mask (an ALiBi-style or T5 relative
bias): NumPy's grad_attn_mask=True and attn.torch's autograd, against torch's
math path in float64 (reference.sdpa) with torch's own float32 error as the
yardstick, for masks broadcast along every kind of dimension."""
import numpy as np
import pytest

import attn
from reference import assert_close_as_torch, sdpa

B, H, L, S, E = 2, 3, 21, 34, 8
MASK_SHAPES = [(1, 1, L, S), (B, 1, L, S), (L, S), (B, H, L, S), (S,), (1, H, 1, S)]


def reference_grads(torch, q, k, v, mask, grad_out, dtype, **kw):
    """d<grad_out, sdpa> / d mask in `dtype` (float64: the reference)."""
    t = lambda a: torch.tensor(np.asarray(a, dtype=dtype))  # noqa: E731
    m = t(mask).requires_grad_()
    out = sdpa(torch, t(q), t(k), t(v), m, **kw)[0]
    (out * t(grad_out)).sum().backward()
    return m.grad.numpy()


@pytest.mark.parametrize("shape", MASK_SHAPES)
@pytest.mark.parametrize("causal", [None, "top_left", "bottom_right"])
@pytest.mark.parametrize("path", ["reference", "fused"])
def test_numpy_mask_gradient_matches_torch(torch, rng, shape, causal, path):
    q = rng.standard_normal((B, H, L, E)).astype(np.float32)
    k = rng.standard_normal((B, H, S, E)).astype(np.float32)
    v = rng.standard_normal((B, H, S, E)).astype(np.float32)
    mask = rng.standard_normal(shape).astype(np.float32)
    mask[rng.random(shape) < 0.1] = -np.inf
    g = rng.standard_normal((B, H, L, E)).astype(np.float32)
    kw = dict(is_causal=causal is not None, alignment=causal or "top_left")
    res = attn.scaled_dot_product_attention_backward(
        g, q, k, v, attn_mask=mask, is_causal=causal is not None,
        causal_alignment=causal or "top_left", path=path, grad_attn_mask=True)
    dmask = res[-1]
    assert dmask.shape == shape and dmask.dtype == np.float32
    want = reference_grads(torch, q, k, v, mask, g, np.float64, **kw)
    torch32 = reference_grads(torch, q, k, v, mask, g, np.float32, **kw)
    assert_close_as_torch(dmask, want, torch32, what=f"d mask {shape}")


def test_numpy_mask_gradient_with_batch_dims_and_a_second_mask(torch, rng):
    """Five-dimensional inputs (the library's batch is merged) and a bool
    mask next to the float one: the float mask's gradient by position."""
    q = rng.standard_normal((2, 2, 2, 5, 4)).astype(np.float32)
    k = rng.standard_normal((2, 2, 2, 7, 4)).astype(np.float32)
    v = rng.standard_normal((2, 2, 2, 7, 4)).astype(np.float32)
    bias = rng.standard_normal((2, 1, 1, 5, 7)).astype(np.float32)
    keep = rng.random((5, 7)) < 0.8
    g = rng.standard_normal((2, 2, 2, 5, 4)).astype(np.float32)
    res = attn.scaled_dot_product_attention_backward(g, q, k, v, attn_mask=(keep, bias),
                                                     grad_attn_mask=True)
    none, dbias = res[-1]
    assert none is None
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    m = t(bias).requires_grad_()
    out = sdpa(torch, t(q), t(k), t(v), m.masked_fill(~torch.tensor(keep), -np.inf))[0]
    (out * t(g)).sum().backward()
    np.testing.assert_allclose(dbias, m.grad.numpy(), atol=2e-5)


def test_numpy_mask_gradient_needs_a_float_mask(rng):
    q = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
    with pytest.raises(TypeError, match="attn_mask: a gradient needs a floating-point mask"):
        attn.scaled_dot_product_attention_backward(q, q, q, q, attn_mask=np.ones((3, 3), bool),
                                                   grad_attn_mask=True)


@pytest.mark.parametrize("shape", MASK_SHAPES)
def test_torch_learned_bias_gets_its_gradient(torch, rng, shape):
    import attn.torch as at
    q, k, v = (torch.tensor(rng.standard_normal(s), dtype=torch.float32, requires_grad=True)
               for s in ((B, H, L, E), (B, H, S, E), (B, H, S, E)))
    bias = torch.tensor(rng.standard_normal(shape), dtype=torch.float32, requires_grad=True)
    g = torch.tensor(rng.standard_normal((B, H, L, E)), dtype=torch.float32)
    (at.scaled_dot_product_attention(q, k, v, bias, is_causal=True) * g).sum().backward()
    assert bias.grad is not None and bias.grad.shape == bias.shape
    grads = {}
    for dtype in (torch.float64, torch.float32):
        qq, kk, vv, bb = (x.detach().to(dtype).requires_grad_() for x in (q, k, v, bias))
        (sdpa(torch, qq, kk, vv, bb, is_causal=True)[0] * g.to(dtype)).sum().backward()
        grads[dtype] = [x.grad.numpy() for x in (qq, kk, vv, bb)]
    for name, ours, want, t32 in zip("qkvm", (q.grad, k.grad, v.grad, bias.grad),
                                     grads[torch.float64], grads[torch.float32]):
        assert_close_as_torch(ours.numpy(), want, t32, what=f"d{name} (mask {shape})")


def test_torch_float64_bias_and_second_mask(torch, rng):
    """A float64 bias keeps its dtype; in the pair (key padding, bias) only
    the bias gets a gradient; a bias that does not require grad gets none."""
    import attn.torch as at
    q = torch.tensor(rng.standard_normal((1, 2, 4, 8)), requires_grad=True)
    bias = torch.tensor(rng.standard_normal((2, 4, 4)), requires_grad=True)
    pad = torch.tensor([[True, True, False, True]]).view(1, 1, 1, 4)
    at.scaled_dot_product_attention(q, q, q, (pad, bias)).sum().backward()
    assert bias.grad.dtype == torch.float64 and bias.grad.shape == (2, 4, 4)
    qq, bb = q.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    sdpa(torch, qq, qq, qq, bb.masked_fill(~pad, -np.inf))[0].sum().backward()
    np.testing.assert_allclose(bias.grad.numpy(), bb.grad.numpy(), atol=1e-5)
    frozen = bias.detach()
    q.grad = None
    at.scaled_dot_product_attention(q, q, q, frozen).sum().backward()
    assert frozen.grad is None and q.grad is not None


def test_mha_learned_float_attn_mask_gets_its_gradient(torch, rng):
    import attn.torch as at
    torch.manual_seed(0)
    ours = at.MultiheadAttention(8, 2, batch_first=True)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    ref.load_state_dict(ours.state_dict())
    x = torch.tensor(rng.standard_normal((2, 5, 8)), dtype=torch.float32)
    m1 = torch.tensor(rng.standard_normal((5, 5)), dtype=torch.float32, requires_grad=True)
    m2 = m1.detach().clone().requires_grad_()
    ours(x, x, x, attn_mask=m1)[0].sum().backward()
    ref(x, x, x, attn_mask=m2)[0].sum().backward()
    np.testing.assert_allclose(m1.grad.numpy(), m2.grad.numpy(), atol=1e-5)


def test_mask_gradient_with_dropout_agrees_between_paths(rng):
    """Dropout's keep mask is a function of (seed, offset, b, h, i, j): the
    reference path and the fused kernels differentiate the same function."""
    q = rng.standard_normal((2, 2, 40, 16)).astype(np.float32)
    k = rng.standard_normal((2, 2, 130, 16)).astype(np.float32)
    bias = rng.standard_normal((2, 1, 40, 130)).astype(np.float32)
    g = rng.standard_normal((2, 2, 40, 16)).astype(np.float32)
    grads = [attn.scaled_dot_product_attention_backward(
        g, q, k, k, attn_mask=bias, dropout_p=0.3, dropout_seed=11, path=path,
        grad_attn_mask=True)[-1] for path in ("reference", "fused")]
    np.testing.assert_allclose(grads[0], grads[1], atol=2e-5)
    plain = attn.scaled_dot_product_attention_backward(g, q, k, k, attn_mask=bias,
                                                       grad_attn_mask=True)[-1]
    assert np.abs(plain - grads[1]).max() > 1e-3  # dropout did change it
