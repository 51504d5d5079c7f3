"""float16 arrays reach the library as they are (ATTN_F16 views, no copy)
and give float16 results: exactly the float32 results on the same values,
rounded to nearest even (numpy's astype(float16) rounds the same way), and
within the README's float16 bound of a float64 reference."""
import numpy as np
import pytest

import attn
from attn import _tensor


def sdpa_reference(q, k, v, is_causal):
    """softmax(q kᵀ / sqrt(D)) v in float64, top-left causal."""
    x = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if is_causal:
        L, S = x.shape[-2:]
        x = np.where(np.arange(S)[None, :] <= np.arange(L)[:, None], x, -np.inf)
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def _inputs(seed, shape_q, shape_kv):
    r = np.random.default_rng(seed)
    q = r.standard_normal(shape_q).astype(np.float16)
    k = r.standard_normal(shape_kv).astype(np.float16)
    v = r.standard_normal(shape_kv).astype(np.float16)
    return q, k, v


@pytest.mark.parametrize("path", ["auto", "reference"])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_is_the_float32_result_rounded(path, causal):
    q, k, v = _inputs(1, (2, 4, 33, 16), (2, 4, 50, 16))
    out = attn.scaled_dot_product_attention(q, k, v, is_causal=causal, path=path)
    assert out.dtype == np.float16
    want = attn.scaled_dot_product_attention(q.astype(np.float32), k.astype(np.float32),
                                             v.astype(np.float32), is_causal=causal, path=path)
    np.testing.assert_array_equal(out, want.astype(np.float16))
    ref = sdpa_reference(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                         is_causal=causal)
    mag = sdpa_reference(q.astype(np.float64), k.astype(np.float64),
                         np.abs(v.astype(np.float64)), is_causal=causal)
    bound = 2.0 ** -11 * (np.abs(ref) + mag) + 2.0 ** -25 + 1e-5 * mag
    assert np.all(np.abs(out.astype(np.float64) - ref) <= bound)


def test_float16_views_pass_without_copy(monkeypatch):
    seen = {}
    monkeypatch.setattr(_tensor, "observer", lambda name, a, t: seen.setdefault(name, (t, a)))
    qkv = np.random.default_rng(2).standard_normal((1, 9, 3, 2, 8)).astype(np.float16)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    attn.scaled_dot_product_attention(q, k, v)
    for name, a in (("query", q), ("key", k), ("value", v)):
        t, _ = seen[name]
        assert t.dtype == 3 and t.data == a.__array_interface__["data"][0], name


def test_backward_gradients_follow_the_input_dtypes():
    q, k, v = _inputs(3, (1, 4, 20, 8), (1, 2, 30, 8))
    k32 = k.astype(np.float32)
    dout = np.random.default_rng(4).standard_normal((1, 4, 20, 8)).astype(np.float16)
    dq, dk, dv = attn.scaled_dot_product_attention_backward(dout, q, k32, v, enable_gqa=True)
    assert (dq.dtype, dk.dtype, dv.dtype) == (np.float16, np.float32, np.float16)
    want = attn.scaled_dot_product_attention_backward(
        dout.astype(np.float32), q.astype(np.float32), k32, v.astype(np.float32),
        enable_gqa=True)
    np.testing.assert_array_equal(dq, want[0].astype(np.float16))
    np.testing.assert_array_equal(dk, want[1])
    np.testing.assert_array_equal(dv, want[2].astype(np.float16))


def test_a_broadcast_float16_input_is_summed_in_float32():
    q, k, v = _inputs(5, (3, 2, 6, 4), (1, 2, 7, 4))  # k, v broadcast over the batch
    dout = np.ones((3, 2, 6, 4), np.float16)
    _, dk, _ = attn.scaled_dot_product_attention_backward(dout, q, k, v)
    want = attn.scaled_dot_product_attention_backward(
        dout.astype(np.float32), q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
    assert dk.dtype == np.float16 and dk.shape == k.shape
    np.testing.assert_array_equal(dk, want[1].astype(np.float16))
