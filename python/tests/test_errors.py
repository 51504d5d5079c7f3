"""Library failures surface as Python exceptions carrying attn's message."""
import ctypes
import threading
import time

import numpy as np
import pytest

import attn
from attn import _errors, _lib, _tensor
from attn import _structs as S


def test_shape_error_names_the_argument():
    q = np.zeros((1, 1, 4, 8), np.float32)
    k = np.zeros((1, 1, 4, 7), np.float32)
    with pytest.raises(ValueError, match="key: feature size is 7, query has 8") as e:
        attn.scaled_dot_product_attention(q, k, k)
    assert isinstance(e.value, attn.AttnError) and e.value.status == S.ERR_SHAPE
    assert e.value.status_name == _lib.lib.attn_status_string(S.ERR_SHAPE).decode()


def test_option_errors_come_from_the_library():
    q = np.zeros((1, 1, 2, 4), np.float32)
    with pytest.raises(attn.AttnError, match="scale: must be finite and non-negative"):
        attn.scaled_dot_product_attention(q, q, q, scale=-1.0)
    with pytest.raises(ValueError, match=r"attn_mask: shape \(1, 3, 2, 2\) does not broadcast"):
        attn.scaled_dot_product_attention(q, q, q, np.ones((1, 3, 2, 2), bool))


def test_python_side_errors():
    q = np.zeros((1, 2, 2, 4), np.float32)
    k = np.zeros((1, 3, 2, 4), np.float32)
    with pytest.raises(ValueError, match="enable_gqa"):
        attn.scaled_dot_product_attention(q, k, k)
    with pytest.raises(ValueError, match="causal_alignment"):
        attn.scaled_dot_product_attention(q, q, q, is_causal=True, causal_alignment="diagonal")
    with pytest.raises(TypeError, match="query"):
        attn.scaled_dot_product_attention(q.astype(complex), q, q)
    with pytest.raises(TypeError, match="attn_mask"):
        attn.scaled_dot_product_attention(q, q, q, np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match="grad_out: shape"):
        attn.scaled_dot_product_attention_backward(np.zeros((1, 2, 3, 4)), q, q, q)


def test_mha_errors_carry_the_message():
    with pytest.raises(ValueError, match="embed_dim % num_heads"):
        attn.MultiheadAttention(10, 3)
    m = attn.MultiheadAttention(8, 2, batch_first=True)
    x = np.zeros((2, 3, 8), np.float32)
    with pytest.raises(ValueError, match="key_padding_mask: source length is 4"):
        m(x, x, x, key_padding_mask=np.zeros((2, 4), bool))
    with pytest.raises(KeyError, match="missing keys"):
        m.load_state_dict({"in_proj_weight": np.zeros((24, 8))})


def test_allocation_failure_is_memory_error():
    err = S.attn_error(status=S.ERR_ALLOC, message=b"out: cannot allocate 99 bytes")
    with pytest.raises(MemoryError, match="out: cannot allocate 99 bytes"):
        _errors.check(S.ERR_ALLOC, err)


def test_calls_release_the_gil():
    # ctypes.CDLL (not PyDLL) functions drop the GIL for the call's duration...
    assert isinstance(_lib.lib, ctypes.CDLL) and not isinstance(_lib.lib, ctypes.PyDLL)
    assert _lib.lib.attn_sdpa._flags_ & ctypes._FUNCFLAG_PYTHONAPI == 0
    # ...so Python code runs in another thread while attn computes: the main
    # thread's clock readings fill the call's first half. (With the GIL held,
    # the main thread could only resume once the call had returned.)
    x = np.random.default_rng(0).standard_normal((1, 1, 3072, 64)).astype(np.float32)
    out = np.empty_like(x)
    xv, ov = (ctypes.pointer(_tensor.view(a, "x")) for a in (x, out))
    window, started = [], threading.Event()

    def work():  # the bare library call, timed without any Python around it
        started.set()
        t0 = time.perf_counter()
        status = _lib.lib.attn_sdpa(xv, xv, xv, ov, None, None, None, None)
        window.extend((t0, time.perf_counter(), status))

    t = threading.Thread(target=work)
    t.start()
    started.wait()
    readings = []
    while t.is_alive():
        readings.append(time.perf_counter())
    t.join()
    assert window[2] == S.OK
    middle = (window[0] + window[1]) / 2
    early = sum(window[0] < r < middle for r in readings)
    assert early > 100, f"{early} of {len(readings)} main-thread steps ran in the call's first half"


def test_concurrent_calls_from_threads_agree():
    r = np.random.default_rng(1)
    qs = [r.standard_normal((1, 2, 64, 16)).astype(np.float32) for _ in range(4)]
    expected = [attn.scaled_dot_product_attention(q, q, q) for q in qs]
    got = [None] * 4

    def run(i):
        got[i] = attn.scaled_dot_product_attention(qs[i], qs[i], qs[i], num_threads=1)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(e, g)


@pytest.mark.parametrize("kw,message", [
    (dict(dropout_p=1.5), "dropout_p: must be in [0, 1)"),
    (dict(softcap=-1.0), "softcap: must be finite and > 0"),
    (dict(sinks=np.zeros(3, np.float32)), "sinks: 3 heads, the query has 2"),
    (dict(window=(-5, 0)), "window: left must be >= 0"),
    (dict(alibi_slopes=np.zeros(5, np.float32)), "alibi_slopes: 5 heads, the query has 2"),
])
def test_variant_option_errors_carry_the_library_message(kw, message):
    q = np.ones((1, 2, 3, 4), np.float32)
    with pytest.raises(attn.AttnError) as e:
        attn.scaled_dot_product_attention(q, q, q, **kw)
    assert str(e.value).startswith(message)
