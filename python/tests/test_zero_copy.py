"""float32 views reach the library as they are: the view handed over points
into the caller's buffer with the caller's strides."""
import numpy as np
import pytest

import attn
from attn import _tensor


@pytest.fixture
def seen(monkeypatch):
    """name -> (data pointer, element strides) of every view handed to attn."""
    record = {}

    def observer(name, array, t):
        record[name] = (t.data or 0, tuple(t.stride[:t.ndim]), array)

    monkeypatch.setattr(_tensor, "observer", observer)
    return record


def assert_passed_as_is(seen, name, a):
    ptr, strides, _ = seen[name]
    assert ptr == a.__array_interface__["data"][0], f"{name}: copied"
    # strides of size-1 dimensions never matter (broadcasting may zero them)
    want = tuple(s // a.itemsize if n > 1 else 0 for n, s in zip(a.shape, a.strides))
    got = tuple(s if n > 1 else 0 for n, s in zip(a.shape, strides))
    assert got == want, f"{name}: strides changed"


def test_transposed_projection_buffers_pass_without_copy(seen):
    r = np.random.default_rng(0)
    B, N, H, D = 2, 9, 3, 8
    qkv = r.standard_normal((B, N, 3, H, D)).astype(np.float32)  # one packed projection
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, H, N, D) views
    mask = np.tril(np.ones((N, N), dtype=bool))
    out = attn.scaled_dot_product_attention(q, k, v, mask)
    for name, a in (("query", q), ("key", k), ("value", v)):
        assert_passed_as_is(seen, name, a)
    ptr, strides, _ = seen["attn_mask"]
    assert ptr == mask.ctypes.data and strides[-2:] == (N, 1)
    # the library read those buffers: the same numbers as from contiguous copies
    ref = attn.scaled_dot_product_attention(*(np.ascontiguousarray(a) for a in (q, k, v)), mask)
    np.testing.assert_array_equal(out, ref)
    # and it reads them at call time: writing through the view changes the result
    q[...] *= 2
    assert not np.array_equal(attn.scaled_dot_product_attention(q, k, v, mask), out)


def test_reversed_and_broadcast_views_pass_without_copy(seen):
    r = np.random.default_rng(1)
    base = r.standard_normal((1, 2, 7, 4)).astype(np.float32)
    q = base[:, :, ::-1]                              # negative stride
    k = np.broadcast_to(base[:, :1], (1, 2, 7, 4))    # stride 0 over heads
    out = attn.scaled_dot_product_attention(q, k, base)
    assert_passed_as_is(seen, "query", q)
    assert seen["key"][0] == k.__array_interface__["data"][0] and seen["key"][1][1] == 0
    ref = attn.scaled_dot_product_attention(q.copy(), k.copy(), base)
    np.testing.assert_array_equal(out, ref)


def test_other_dtypes_are_converted_once(seen):
    q = np.random.default_rng(2).standard_normal((1, 1, 3, 4))  # float64
    attn.scaled_dot_product_attention(q, q, q)
    _, _, passed = seen["query"]
    assert passed.dtype == np.float32 and passed.flags.c_contiguous


def test_backward_reads_grad_out_view(seen):
    r = np.random.default_rng(3)
    q = r.standard_normal((1, 2, 5, 4)).astype(np.float32)
    g = r.standard_normal((1, 5, 2, 4)).astype(np.float32).transpose(0, 2, 1, 3)
    attn.scaled_dot_product_attention_backward(g, q, q, q)
    assert_passed_as_is(seen, "grad_out", g)


def test_torch_tensors_pass_without_copy(seen, torch):
    import attn.torch as at
    x = torch.randn(2, 6, 3, 8)       # (B, N, H, D)
    q = x.transpose(1, 2)             # (B, H, N, D) view
    at.scaled_dot_product_attention(q, q, q)
    ptr, strides, _ = seen["query"]
    assert ptr == q.data_ptr() and strides == q.stride()


def test_mha_batch_first_false_input_passes_without_copy(seen):
    m = attn.MultiheadAttention(8, 2)          # inputs (L, N, E)
    x = np.random.default_rng(4).standard_normal((5, 3, 8)).astype(np.float32)
    out, _ = m(x, x, x)
    ptr, strides, _ = seen["query"]
    assert ptr == x.ctypes.data and strides == (8, 24, 1)  # the (N, L, E) view of x
    assert out.shape == (5, 3, 8) and out.flags.c_contiguous


def test_torch_mha_passes_its_packed_projection_as_strided_views(seen, torch):
    import attn.torch as at
    m = at.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(3, 5, 8)
    m(x, x, x)
    # (N, H, L, hd) views of the (N, L, 3E) projection: row stride 3E, head stride hd
    for name in ("query", "key", "value"):
        assert seen[name][1] == (5 * 24, 4, 24, 1), name
    assert seen["key"][0] - seen["query"][0] == 8 * 4  # E floats apart, in one buffer
