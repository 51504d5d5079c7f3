"""The short road for the most common call: plain SDPA (no mask or variant)
on float32 (B, H, N, D) views with one batch shape and kv heads equal to
query heads, forward only. Its structs are built in one constructor call
each from (pointer, shape, strides), with no NumPy broadcasting and no
optional outputs, so a tiny call costs little more than the library's own
time (docs/PERFORMANCE.md, "Python per-call overhead")."""
import ctypes as C

from . import _structs as S
from . import _tensor as _views
from . import _threads
from ._errors import check, new_error
from ._lib import lib

_SHAPE = C.c_int64 * S.MAX_DIMS
# torch accepts scale=0 (every score 0); attn reads 0 as "default". The
# smallest float32 subnormal gives the same results: every score rounds to
# (at most) a subnormal, whose exp is exactly 1.
ZERO_SCALE = 1.401298464324817e-45
# B·H·L·S·(E + Ev) multiply-adds below which one thread runs the call
TINY_WORK = 1 << 16


def _tensor(ptr, shape, strides):
    return S.attn_tensor(ptr, S.F32, 4, _SHAPE(*shape), _SHAPE(*strides))


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


def _options(q, k, v, scale, causal, num_threads):
    o = S.attn_sdpa_opts()
    if scale is not None:
        o.scale = ZERO_SCALE if scale == 0.0 else scale
    if causal:
        o.causal = causal
    qs, vs = q[1], v[1]
    o.num_threads = threads_for(num_threads, qs[0] * qs[1] * qs[2] * k[1][2] * (qs[3] + vs[3]))
    return o


def _ref(t):
    return C.byref(_tensor(*t)) if t is not None else None


def forward(q, k, v, out, scale, causal, num_threads, sources=None, lse=None, stats=None):
    """attn_sdpa on (pointer, shape, element strides) triples; out (and the
    LSE (B, H, L) and softmax statistics (B, H, L, 2), when given) written.
    sources: the caller's (query, key, value, out), for _tensor.observer."""
    o = _options(q, k, v, scale, causal, num_threads)
    if stats is not None:
        st = _tensor(*stats)
        o.softmax_stats = C.pointer(st)
    ts = _tensor(*q), _tensor(*k), _tensor(*v), _tensor(*out)
    if _views.observer is not None:
        for name, a, t in zip(("query", "key", "value", "out"), sources, ts):
            _views.observer(name, a, t)
    err = new_error()
    lse_t = None if lse is None else S.attn_tensor(lse[0], S.F32, 3, _SHAPE(*lse[1]),
                                                   _SHAPE(*lse[2]))
    check(lib.attn_sdpa(C.byref(ts[0]), C.byref(ts[1]), C.byref(ts[2]), C.byref(ts[3]),
                        None if lse_t is None else C.byref(lse_t), None, C.byref(o),
                        C.byref(err)), err)


def backward(q, k, v, out, stats, dout, grads, scale, causal, num_threads):
    """attn_sdpa_backward on triples, from the forward's out and softmax
    statistics; grads: (dq, dk, dv) triples or None, written."""
    o = _options(q, k, v, scale, causal, num_threads)
    st = _tensor(*stats)
    o.softmax_stats = C.pointer(st)
    err = new_error()
    check(lib.attn_sdpa_backward(_ref(q), _ref(k), _ref(v), _ref(out), None, _ref(dout),
                                 *(_ref(g) for g in grads), C.byref(o), C.byref(err)), err)
