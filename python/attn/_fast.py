"""The short road for the most common call: plain SDPA (no mask or variant)
on float32 (B, H, N, D) views with one batch shape and kv heads equal to
query heads. A tiny call should cost little more than the library's own
time (docs/PYTHON.md, "Tiny calls"), so this road builds
no ctypes objects per call: each thread keeps one argument block (ten
attn_tensor slots, the opts and the error) whose fields are overwritten
with struct.pack_into, and the library is called with the slots' fixed
addresses."""
import ctypes as C
import platform
import struct
import threading

import numpy as np

from . import _structs as S
from . import _tensor as _views
from . import _threads
from ._errors import check
from ._lib import lib

# torch accepts scale=0 (every score 0); attn reads 0 as "default". The
# smallest float32 subnormal gives the same results: every score rounds to
# (at most) a subnormal, whose exp is exactly 1.
ZERO_SCALE = 1.401298464324817e-45
_F32 = struct.Struct("f")


def scale_option(scale):
    """attn_sdpa_opts.scale for a Python scale: None is the default (0.0),
    0 is ZERO_SCALE; a scale that float32 rounds to 0 is an error, never
    the default."""
    if scale is None:
        return 0.0
    scale = float(scale)
    if scale == 0.0:
        return ZERO_SCALE
    try:
        rounded = _F32.unpack(_F32.pack(scale))[0]
    except OverflowError:
        return scale  # float32 inf: the library refuses it by name
    if rounded == 0.0:
        raise ValueError(f"scale: {scale!r} underflows float32")
    return scale


# B·H·L·S·(E + Ev) multiply-adds below which one thread runs the call
TINY_WORK = 1 << 16

# attn_tensor: data, dtype, ndim, shape[8], stride[8]; the unused dims zero
_TENSOR = {n: struct.Struct(f"Pii{n}q{8 * (S.MAX_DIMS - n)}x{n}q{8 * (S.MAX_DIMS - n)}x")
           for n in (3, 4)}
_SIZE = C.sizeof(S.attn_tensor)
assert all(t.size == _SIZE for t in _TENSOR.values())
QUERY, KEY, VALUE, OUT, LSE, STATS, DOUT, DQ, DK, DV = range(10)
_NAMES = ("query", "key", "value", "out", "lse", "softmax_stats", "grad_out", "grad_query",
          "grad_key", "grad_value")

_sdpa = lib["attn_sdpa"]  # own function objects: no argtypes, the slots pass as c_void_p
_sdpa_backward = lib["attn_sdpa_backward"]


class _Frame:
    """One thread's argument block (a call fills and reads it while it holds
    the GIL up to the library call; the thread makes one call at a time)."""

    def __init__(self):
        self.tensors = (S.attn_tensor * len(_NAMES))()
        base = C.addressof(self.tensors)
        self.slot = tuple(C.c_void_p(base + i * _SIZE) for i in range(len(_NAMES)))
        self.opts = S.attn_sdpa_opts()
        self.opts_p = C.c_void_p(C.addressof(self.opts))
        self.stats_p = C.pointer(self.tensors[STATS])
        self.err = S.attn_error()
        self.err_p = C.c_void_p(C.addressof(self.err))


_local = threading.local()


def _frame():
    try:
        return _local.frame
    except AttributeError:
        _local.frame = _Frame()
        return _local.frame


def _data_offset():
    """Where a CPython ndarray object keeps its data pointer (PyArrayObject's
    `data`, NumPy's C ABI: PyArray_DATA reads it), found on two probe
    arrays; None where that cannot be relied on (another Python)."""
    if platform.python_implementation() != "CPython":
        return None
    probes = [np.empty(3, np.float32), np.empty((2, 5), np.float64)[:, 1:]]
    for off in range(8, 65, 8):
        if all(C.c_void_p.from_address(id(a) + off).value == a.__array_interface__["data"][0]
               for a in probes):
            return off
    return None


_DATA_AT = _data_offset()


def data(a):
    """The data pointer of a NumPy array (a.ctypes.data, ten times faster)."""
    if _DATA_AT is None:
        return a.ctypes.data
    return C.c_void_p.from_address(id(a) + _DATA_AT).value


def triple(a):
    """(pointer, shape, element strides) of a 4-D float32 NumPy array."""
    s0, s1, s2, s3 = a.strides
    return data(a), a.shape, (s0 >> 2, s1 >> 2, s2 >> 2, s3 >> 2)


def threads_for(num_threads, work):
    """The thread count a call uses: one when the work is tiny (a second
    thread's wake-up costs more; results do not depend on the count)."""
    return 1 if work < TINY_WORK else _threads.resolve(num_threads)


def applies(qs, ks, vs, attn_mask, dropout_p, scale, extras):
    """True when a call with these (B, H, N, D) shapes and options can take
    the short road (equal heads: enable_gqa changes nothing); extras: true
    when any other option differs from its default."""
    return (attn_mask is None and not dropout_p and not extras and len(qs) == 4 and
            len(ks) == 4 and len(vs) == 4 and qs[:2] == ks[:2] == vs[:2] and
            ks[2] == vs[2] and qs[3] == ks[3] and (scale is None or scale >= 0))


def _fill(f, slot, t):
    """Slot `slot` of frame f set to the (pointer, shape, strides) triple t
    (None: the slot's NULL)."""
    if t is None:
        return None
    ptr, shape, strides = t
    _TENSOR[len(shape)].pack_into(f.tensors, slot * _SIZE, ptr, S.F32, len(shape), *shape,
                                  *strides)
    return f.slot[slot]


def _options(f, q, k, v, scale, causal, num_threads, precision, stats):
    o = f.opts
    o.scale = scale_option(scale)
    o.causal = causal
    qs, vs = q[1], v[1]
    o.num_threads = threads_for(num_threads, qs[0] * qs[1] * qs[2] * k[1][2] * (qs[3] + vs[3]))
    o.precision = precision
    o.softmax_stats = None if stats is None else f.stats_p


def _observe(f, sources, slots):
    for a, i in zip(sources, slots):
        _views.observer(_NAMES[i], a, f.tensors[i])


def forward(q, k, v, out, scale, causal, num_threads, sources=None, lse=None, stats=None,
            precision=0):
    """attn_sdpa on (pointer, shape, element strides) triples; out (and the
    LSE (B, H, L) and softmax statistics (B, H, L, 2), when given) written.
    sources: the caller's (query, key, value, out), for _tensor.observer."""
    f = _frame()
    args = (_fill(f, QUERY, q), _fill(f, KEY, k), _fill(f, VALUE, v), _fill(f, OUT, out),
            _fill(f, LSE, lse))
    _fill(f, STATS, stats)
    _options(f, q, k, v, scale, causal, num_threads, precision, stats)
    if _views.observer is not None:
        _observe(f, sources, (QUERY, KEY, VALUE, OUT))
    check(_sdpa(*args, None, f.opts_p, f.err_p), f.err)


def backward(q, k, v, out, stats, dout, grads, scale, causal, num_threads, precision=0):
    """attn_sdpa_backward on triples, from the forward's out and softmax
    statistics; grads: (dq, dk, dv) triples or None, written."""
    f = _frame()
    args = (_fill(f, QUERY, q), _fill(f, KEY, k), _fill(f, VALUE, v), _fill(f, OUT, out), None,
            _fill(f, DOUT, dout), _fill(f, DQ, grads[0]), _fill(f, DK, grads[1]),
            _fill(f, DV, grads[2]))
    _fill(f, STATS, stats)
    _options(f, q, k, v, scale, causal, num_threads, precision, stats)
    check(_sdpa_backward(*args, f.opts_p, f.err_p), f.err)
