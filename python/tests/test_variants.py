"""Window, ALiBi, softcap, sinks, dropout and softmax stats through the
Python API. Against the float64 reference where this libattn implements a
feature; where it does not, the call must fail with the library's message
(never silently ignore the option)."""
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


@pytest.mark.parametrize("feature", list(OPTIONS))
def test_score_variants(torch, feature):
    kw = OPTIONS[feature]
    if not _features.supported(feature):
        with pytest.raises(attn.UnsupportedError, match="not implemented"):
            attn.scaled_dot_product_attention(Q, K, V, **kw)
        return
    out, lse = attn.scaled_dot_product_attention(Q, K, V, return_lse=True, **kw)
    t = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (Q, K, V)]
    ref_kw = dict(kw)
    sinks_t = None
    if "sinks" in ref_kw:
        sinks_t = torch.tensor(ref_kw.pop("sinks"), dtype=torch.float64, requires_grad=True)
    ro, rl, _ = sdpa(torch, *t, sinks=sinks_t, **ref_kw)
    assert max_error(out, ro.detach().numpy()) < 1e-5
    assert max_error(lse, rl.detach().numpy()) < 1e-5
    grads = attn.scaled_dot_product_attention_backward(G, Q, K, V, out, lse, **kw)
    (ro * torch.tensor(G, dtype=torch.float64)).sum().backward()
    for ours, x in zip(grads, t + ([sinks_t] if sinks_t is not None else [])):
        assert max_error(ours, x.grad.numpy()) < 1e-4


def test_dropout():
    kw = dict(dropout_p=0.3, dropout_seed=7)
    if not _features.supported("dropout"):
        with pytest.raises(attn.UnsupportedError, match="not implemented"):
            attn.scaled_dot_product_attention(Q, K, V, **kw)
        return
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
    if not _features.supported("softmax_stats"):
        with pytest.raises(attn.UnsupportedError, match="not implemented"):
            attn.scaled_dot_product_attention(Q, K, V, return_softmax_stats=True)
        return
    out, lse, stats = attn.scaled_dot_product_attention(Q, K, V, return_lse=True,
                                                        return_softmax_stats=True)
    assert stats.shape == lse.shape + (2,)
    np.testing.assert_allclose(stats[..., 0] + stats[..., 1], lse, rtol=1e-6, atol=1e-6)
    with_stats = attn.scaled_dot_product_attention_backward(G, Q, K, V, out,
                                                            softmax_stats=stats)
    with_lse = attn.scaled_dot_product_attention_backward(G, Q, K, V, out, lse)
    for a, b in zip(with_stats, with_lse):
        assert max_error(a, b) < 1e-5


def test_features_report():
    """Names what this library build implements (shown with pytest -s)."""
    report = {name: _features.supported(name) for name in _features.NAMES}
    print("libattn features:", report)
    assert set(report) == {"window", "alibi", "softcap", "sinks", "dropout", "softmax_stats"}
