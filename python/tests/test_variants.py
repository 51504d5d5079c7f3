"""Window, ALiBi, softcap, sinks, dropout and softmax stats through the
Python API, against the float64 reference (and finite differences for
dropout)."""
import numpy as np
import pytest

import attn
from attn import _features
from reference import max_error, sdpa

R = np.random.default_rng(0)
Q = R.standard_normal((2, 4, 9, 16)).astype(np.float32)
K = R.standard_normal((2, 4, 12, 16)).astype(np.float32)
V = R.standard_normal((2, 4, 12, 8)).astype(np.float32)
G = R.standard_normal((2, 4, 9, 8)).astype(np.float32)

OPTIONS = {
    "window": dict(window=(3, 1)),
    "alibi": dict(alibi_slopes=np.array([0.5, 0.25, 0.125, 0.0625], np.float32)),
    "softcap": dict(softcap=2.0),
    "sinks": dict(sinks=np.array([0.3, -1.0, 2.0, 0.0], np.float32)),
}


KV2 = (K[:, ::2].copy(), V[:, ::2].copy())  # 2 kv heads for 4 query heads
MASK = R.random((9, 12)) < 0.8


@pytest.mark.parametrize("combined", [False, True], ids=["alone", "gqa_mask_causal"])
@pytest.mark.parametrize("feature", list(OPTIONS))
def test_score_variants(torch, feature, combined):
    kw = dict(OPTIONS[feature])
    k, v = KV2 if combined else (K, V)
    extra = dict(attn_mask=MASK, is_causal=True, causal_alignment="bottom_right",
                 enable_gqa=True) if combined else {}
    out, lse = attn.scaled_dot_product_attention(Q, k, v, return_lse=True, **kw, **extra)
    t = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (Q, k, v)]
    ref_kw = dict(kw)
    sinks_t = None
    if "sinks" in ref_kw:
        sinks_t = torch.tensor(ref_kw.pop("sinks"), dtype=torch.float64, requires_grad=True)
    ref_extra = dict(attn_mask=torch.tensor(MASK), is_causal=True, alignment="bottom_right",
                     enable_gqa=True) if combined else {}
    ro, rl, _ = sdpa(torch, *t, sinks=sinks_t, **ref_kw, **ref_extra)
    assert max_error(out, ro.detach().numpy()) < 1e-5
    assert max_error(lse, rl.detach().numpy()) < 1e-5
    grads = attn.scaled_dot_product_attention_backward(G, Q, k, v, out, lse, **kw, **extra)
    (ro * torch.tensor(G, dtype=torch.float64)).sum().backward()
    expected = t + ([sinks_t] if sinks_t is not None else [])
    assert len(grads) == len(expected)
    for ours, x in zip(grads, expected):
        assert max_error(ours, x.grad.numpy()) < 1e-4


def test_alibi_slopes_helper():
    np.testing.assert_array_equal(attn.alibi_slopes(4), [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8])
    # 6 heads: the 4 of the power of two, then every other slope of the 8-head sequence
    np.testing.assert_allclose(attn.alibi_slopes(6), [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8,
                                                      2.0**-1, 2.0**-3])


def test_dropout():
    kw = dict(dropout_p=0.3, dropout_seed=7)
    a = attn.scaled_dot_product_attention(Q, K, V, **kw)
    np.testing.assert_array_equal(a, attn.scaled_dot_product_attention(Q, K, V, **kw))
    assert not np.array_equal(a, attn.scaled_dot_product_attention(Q, K, V, dropout_p=0.3,
                                                                   dropout_seed=8))
    # the backward regenerates the mask: compare with finite differences of the
    # forward under the same seed (the mask does not depend on the inputs)
    dq = attn.scaled_dot_product_attention_backward(G, Q, K, V, **kw)[0]
    d = R.standard_normal(Q.shape).astype(np.float32)
    h = 1e-2
    f = lambda x: float((attn.scaled_dot_product_attention(x, K, V, **kw).astype(np.float64)  # noqa
                         * G).sum())
    numeric = (f(Q + h * d) - f(Q - h * d)) / (2 * h)
    assert abs(float((dq * d).sum()) - numeric) < 2e-2 * max(1.0, abs(numeric))


def test_softmax_stats():
    out, lse, stats = attn.scaled_dot_product_attention(Q, K, V, return_lse=True,
                                                        return_softmax_stats=True)
    assert stats.shape == lse.shape + (2,)
    np.testing.assert_allclose(stats[..., 0] + stats[..., 1], lse, rtol=1e-6, atol=1e-6)
    with_stats = attn.scaled_dot_product_attention_backward(G, Q, K, V, out,
                                                            softmax_stats=stats)
    with_lse = attn.scaled_dot_product_attention_backward(G, Q, K, V, out, lse)
    for a, b in zip(with_stats, with_lse):
        assert max_error(a, b) < 1e-5


def test_feature_probes_see_every_feature():
    """attn.torch picks softmax stats over the LSE by this probe."""
    assert {name: _features.supported(name) for name in _features.NAMES} == \
        dict.fromkeys(["window", "alibi", "softcap", "sinks", "dropout", "softmax_stats"], True)


def test_torch_function_dropout_and_sinks_gradients(torch):
    """Through attn.torch: with torch.manual_seed reset before every call the
    dropout mask is fixed, so gradcheck's finite differences test that the
    backward regenerates the forward's mask; sinks get their gradient."""
    import attn.torch as at
    q, k, v = (torch.tensor(a[:1, :2, :4, :6], dtype=torch.float64, requires_grad=True)
               for a in (Q, K, V))
    sinks = torch.tensor([0.5, -0.5], dtype=torch.float64, requires_grad=True)

    def f(a, b, c, s):
        torch.manual_seed(123)
        return at.scaled_dot_product_attention(a, b, c, dropout_p=0.25, sinks=s)

    assert torch.autograd.gradcheck(f, (q, k, v, sinks), eps=1e-3, atol=3e-3, rtol=2e-2)
    torch.manual_seed(1)
    a = f(q, k, v, sinks)
    torch.manual_seed(2)
    assert torch.equal(a, f(q, k, v, sinks))  # the seed comes from torch's generator
    assert not torch.equal(a, at.scaled_dot_product_attention(q, k, v, dropout_p=0.25,
                                                              sinks=sinks))


def test_mha_dropout_gradients(torch):
    """attn.torch.MultiheadAttention in training mode: the backward sees the
    forward's dropout mask (gradcheck with the seed reset per call)."""
    import attn.torch as at
    torch.manual_seed(0)
    m = at.MultiheadAttention(8, 2, dropout=0.3, batch_first=True).double().train()
    x = torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True)

    def f(inp):
        torch.manual_seed(7)
        return m(inp, inp, inp, need_weights=False)[0]

    assert torch.autograd.gradcheck(f, (x,), eps=1e-3, atol=3e-3, rtol=2e-2)
    m.eval()
    assert torch.equal(m(x, x, x)[0], m(x, x, x)[0])
