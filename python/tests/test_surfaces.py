"""What a new user meets first on either front end: integer masks refused
(never added as a bias), double backward refused with a clear message,
torch.jit.trace replay, torch's thread count followed, NumPy inputs of
different ranks broadcast like torch's matmul, integer inputs refused,
dropout_p = 1 accepted, and integer options checked before ctypes could wrap
or truncate them."""
import numpy as np
import pytest

import attn
from reference import sdpa


@pytest.fixture(scope="module")
def at(torch):
    import attn.torch
    return attn.torch


# ------------------------------------------------------------- integer masks
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8"])
def test_torch_sdpa_refuses_integer_masks(torch, at, dtype):
    q = torch.randn(1, 1, 3, 4)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=getattr(torch, dtype))
    with pytest.raises(TypeError, match=f"attn_mask: expected a bool or floating-point mask, "
                                        f"got torch.{dtype}"):
        at.scaled_dot_product_attention(q, q, q, mask)


def test_torch_mha_refuses_integer_masks_and_reads_uint8_as_bool(torch, at):
    m = at.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 3, 8)
    with pytest.raises(TypeError, match="key_padding_mask: expected a bool"):
        m(x, x, x, key_padding_mask=torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="attn_mask: expected a bool"):
        m(x, x, x, attn_mask=torch.zeros(3, 3, dtype=torch.int32))
    blocked = torch.tensor([[0, 1, 1], [0, 0, 1], [0, 0, 0]], dtype=torch.uint8)
    a = m(x, x, x, attn_mask=blocked)[0]
    b = m(x, x, x, attn_mask=blocked.bool())[0]
    assert torch.equal(a, b)


def test_numpy_refuses_integer_masks_and_inputs():
    q = np.ones((1, 1, 3, 4), np.float32)
    with pytest.raises(TypeError, match="attn_mask: expected a bool or floating-point mask"):
        attn.scaled_dot_product_attention(q, q, q, np.eye(3, dtype=np.int64))
    with pytest.raises(TypeError, match="query: expected a real floating-point array, got "
                                        "dtype int32"):
        attn.scaled_dot_product_attention(np.ones((1, 1, 3, 4), np.int32), q, q)
    with pytest.raises(TypeError, match="value: expected a real floating-point array"):
        attn.scaled_dot_product_attention(q, q, np.ones((1, 1, 3, 4), np.int64))


# ----------------------------------------------------------- double backward
def test_double_backward_is_a_clear_error(torch, at):
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    out = at.scaled_dot_product_attention(q, q, q, is_causal=True)
    (g,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="attn.torch: double backward is not supported"):
        g.sum().backward()
    # first-order gradients with create_graph=True are still right
    ref = q.detach().clone().requires_grad_()
    sdpa(torch, ref, ref, ref, is_causal=True)[0].sum().backward()
    torch.testing.assert_close(g.detach(), ref.grad, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------ torch.jit.trace
def test_jit_trace_of_mha_replays(torch, at):
    torch.manual_seed(0)
    m = at.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)

    class SelfAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, t):
            return self.m(t, t, t, need_weights=False)[0]

    with torch.no_grad():
        traced = torch.jit.trace(SelfAttention(), x, check_trace=False)
        y = torch.randn(2, 5, 8)
        for _ in range(2):  # each replay runs the recorded Function again
            torch.testing.assert_close(traced(y), m(y, y, y, need_weights=False)[0])


# ------------------------------------------------------------------ threads
def test_torch_front_end_follows_torch_threads(torch, at, monkeypatch):
    import attn.sdpa as numpy_sdpa
    from attn import _fast
    seen = []
    real, real_fast = numpy_sdpa.lib.attn_sdpa, _fast._sdpa

    def spy(*args):
        seen.append(args[6]._obj.num_threads)
        return real(*args)

    def spy_fast(*args):  # the short road passes its opts by address
        seen.append(_fast._frame().opts.num_threads)
        return real_fast(*args)
    monkeypatch.setattr(numpy_sdpa.lib, "attn_sdpa", spy)
    monkeypatch.setattr(_fast, "_sdpa", spy_fast)
    q = torch.randn(1, 2, 64, 16)  # enough work for two threads
    before = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            at.scaled_dot_product_attention(q, q, q)
            assert seen[-1] == n
        at.scaled_dot_product_attention(q, q, q, num_threads=1)
        assert seen[-1] == 1
        attn.set_num_threads(2)
        torch.set_num_threads(1)
        at.scaled_dot_product_attention(q, q, q)
        assert seen[-1] == 2  # attn's own setting wins over torch's
        at.scaled_dot_product_attention(q[:, :, :4], q[:, :, :4], q[:, :, :4])
        assert seen[-1] == 1  # too little work for a second thread
    finally:
        attn.set_num_threads(0)
        torch.set_num_threads(before)


# -------------------------------------------------------- NumPy broadcasting
@pytest.mark.parametrize("shapes", [
    ((2, 3, 5, 4), (3, 7, 4), (3, 7, 6)),        # kv without the batch dim
    ((2, 3, 5, 4), (7, 4), (7, 6)),              # kv without batch and heads
    ((3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)),     # q without the batch dim
    ((2, 2, 3, 5, 4), (3, 7, 4), (2, 1, 3, 7, 6)),
])
def test_numpy_ranks_broadcast_like_matmul(torch, rng, shapes):
    qs, ks, vs = shapes
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    g = rng.standard_normal(np.broadcast_shapes(qs[:-1], ks[:-2] + (1,)) + (vs[-1],)).astype(
        np.float32)
    out = attn.scaled_dot_product_attention(q, k, v)
    assert out.shape == g.shape
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    nd = max(len(s) for s in shapes)  # the reference wants equal ranks: matmul's padding
    want = sdpa(torch, *(t.reshape((1,) * (nd - t.dim()) + t.shape) for t in (tq, tk, tv)))[0]
    np.testing.assert_allclose(out, want.detach().numpy(), atol=2e-6)
    (want * torch.tensor(g, dtype=torch.float64)).sum().backward()
    grads = attn.scaled_dot_product_attention_backward(g, q, k, v)
    for ours, t in zip(grads, (tq, tk, tv)):
        assert ours.shape == t.shape
        np.testing.assert_allclose(ours, t.grad.numpy(), atol=2e-5)


# ------------------------------------------------------------ dropout_p = 1
def test_dropout_one_is_accepted_like_torch(torch, rng):
    q = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    out, lse = attn.scaled_dot_product_attention(q, q, q, dropout_p=1.0, return_lse=True)
    assert not out.any()
    np.testing.assert_array_equal(lse, attn.scaled_dot_product_attention(q, q, q,
                                                                         return_lse=True)[1])
    grads = attn.scaled_dot_product_attention_backward(np.ones_like(q), q, q, q, dropout_p=1.0,
                                                       dropout_seed=0)
    assert all(not g.any() for g in grads)
    # torch's own dropout(p=1) zeroes everything too
    assert not torch.nn.functional.dropout(torch.ones(3), p=1.0).any()
    with pytest.raises(attn.AttnError, match="dropout_p"):
        attn.scaled_dot_product_attention(q, q, q, dropout_p=1.5)


# ------------------------------------------------ integer options and ctypes
@pytest.mark.parametrize("window,error,match", [
    ((2**64, 1), ValueError, "window left: .*beyond int64"),
    ((0, -2**63 - 1), ValueError, "window right: .*beyond int64"),
    ((1.9, 2), TypeError, "window left: expected an integer, got 1.9"),
    ((1, True), TypeError, "window right: expected an integer"),
])
def test_window_values_are_checked_not_wrapped(window, error, match):
    q = np.ones((1, 1, 3, 4), np.float32)
    with pytest.raises(error, match=match):
        attn.scaled_dot_product_attention(q, q, q, window=window)


def test_window_accepts_numpy_integers_and_none():
    q = np.random.default_rng(0).standard_normal((1, 1, 5, 4)).astype(np.float32)
    a = attn.scaled_dot_product_attention(q, q, q, window=(np.int64(1), None))
    b = attn.scaled_dot_product_attention(q, q, q, window=(1, -1))
    np.testing.assert_array_equal(a, b)


def test_other_integer_options_are_checked():
    q = np.ones((1, 1, 3, 4), np.float32)
    with pytest.raises(ValueError, match="dropout_seed"):
        attn.scaled_dot_product_attention(q, q, q, dropout_p=0.5, dropout_seed=2**64)
    with pytest.raises(TypeError, match="dropout_offset"):
        attn.scaled_dot_product_attention(q, q, q, dropout_p=0.5, dropout_seed=1,
                                          dropout_offset=0.5)
    with pytest.raises(TypeError, match="heads"):
        attn.alibi_slopes(4.5)


def test_a_scale_that_underflows_float32_is_an_error_on_every_road(rng):
    # float32 0 means "the default 1/sqrt(D)" to the library: never silently
    q = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    x = rng.standard_normal((6, 2, 8)).astype(np.float32)
    cu = np.array([0, 3, 6], np.int32)
    import attn.varlen
    from attn.flash_attn import flash_attn_varlen_func
    calls = [lambda: attn.scaled_dot_product_attention(q, q, q, scale=1e-50),
             lambda: attn.scaled_dot_product_attention(q, q, q, scale=1e-50, return_lse=True),
             lambda: attn.varlen.varlen_attention(x, x, x, cu, cu, softmax_scale=1e-50),
             lambda: flash_attn_varlen_func(x, x, x, cu, cu, 3, 3, softmax_scale=1e-50)]
    for call in calls:
        with pytest.raises(ValueError, match="underflows float32"):
            call()
    # 0 itself is torch's "every score 0": uniform weights, not the default
    o = attn.scaled_dot_product_attention(q, q, q, scale=0.0)
    np.testing.assert_allclose(o, np.broadcast_to(q.mean(2, keepdims=True), o.shape), atol=1e-6)
