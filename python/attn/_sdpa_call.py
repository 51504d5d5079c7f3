"""Torch-style SDPA arguments turned into attn's 4-D views and attn_sdpa_opts.

torch takes q (..., Hq, L, E), k (..., Hkv, S, E), v (..., Hkv, S, Ev) with
any number of leading batch dimensions that broadcast; attn takes
(B, H, N, D) views. The leading dimensions are broadcast (stride 0) and merged
into B, which costs nothing unless merging needs a copy (rare: dimensions whose
strides do not line up).
"""
import ctypes as C
import math
import numbers
import secrets

import numpy as np

from . import _fast
from . import _structs as S
from . import _tensor

_ALIGNMENTS = {"top_left": S.CAUSAL_TOP_LEFT, "bottom_right": S.CAUSAL_BOTTOM_RIGHT}
_PATHS = {"auto": S.PATH_AUTO, "reference": S.PATH_REFERENCE, "fused": S.PATH_FUSED}
_PRECISIONS = {"exact": S.PRECISION_EXACT, "bf16": S.PRECISION_BF16}


def precision_code(precision):
    """attn_sdpa_opts.precision for "exact" (float32 arithmetic, 16-bit
    inputs widened exactly) or "bf16" (bfloat16 products, float32
    accumulation: README "bfloat16 products")."""
    try:
        return _PRECISIONS[precision]
    except (KeyError, TypeError):
        raise ValueError(f"precision: must be 'exact' or 'bf16', got {precision!r}") from None


def _merge_leading(a, ndim):
    """a with its leading dimensions merged so it has `ndim` dimensions, as a
    view whenever the strides allow it."""
    k = a.ndim - ndim + 1
    shape = (math.prod(a.shape[:k]),) + a.shape[k:]
    try:
        v = a.view()
        v.shape = shape  # raises instead of copying
        return v
    except AttributeError:
        return np.reshape(a, shape)


def integer(x, name):
    """x as a Python int, refusing floats and bools (ctypes would truncate
    1.9 to 1) and anything that is not a whole number."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {x!r}")
    return int(x)


def window_side(x, name):
    """One side of a sliding window: an integer (-1 or None: unbounded; the
    library refuses the other negatives) within int64, which ctypes would
    wrap (2**64 acting as 0)."""
    if x is None:
        return -1
    x = integer(x, name)
    if not -2**63 <= x < 2**63:
        raise ValueError(f"{name}: must be >= 0, or -1 for unbounded; got {x}, beyond int64")
    return x


def uint64(x, name):
    x = integer(x, name)
    if not 0 <= x < 2**64:
        raise ValueError(f"{name}: must be in [0, 2**64), got {x}")
    return x


def _sum_to(g, shape):
    """g summed over the dimensions an array of `shape` was broadcast along
    (torch autograd's rule for broadcast inputs)."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
    axes = tuple(i for i, (n, want) in enumerate(zip(g.shape, shape)) if n != want)
    return np.ascontiguousarray(g.sum(axis=axes, keepdims=True)) if axes else g


def _to4d(a, batch):
    """(..., H, N, D) broadcast to the batch shape `batch`, then (B, H, N, D)."""
    if a.ndim == 2:
        return a[None, None]
    if a.shape[:-3] == batch:  # the common case, without numpy's broadcasting machinery
        return a[None] if a.ndim == 3 else a if a.ndim == 4 else _merge_leading(a, 4)
    a = np.broadcast_to(a, batch + a.shape[-3:])
    return a[None] if a.ndim == 3 else _merge_leading(a, 4)


class SdpaCall:
    """The views and options of one forward or backward call.

    Attributes: q, k, v (the library's 4-D float32 or float16 views), shapes (the
    caller's shapes, for gradients), batch (the broadcast leading shape),
    lead (batch + query heads: the leading shape of every output), L, S,
    opts, and keep (the views the opts point to, alive as long as the call)."""

    def __init__(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                 scale=None, enable_gqa=False, causal_alignment="top_left", window=None,
                 alibi_slopes=None, softcap=0.0, sinks=None, dropout_seed=None,
                 dropout_offset=0, num_threads=None, path="auto", precision="exact"):
        q, k, v = (_tensor.floating(x, n) for x, n in ((query, "query"), (key, "key"),
                                                       (value, "value")))
        for a, n in ((q, "query"), (k, "key"), (v, "value")):
            if a.ndim < 2:
                raise ValueError(f"{n}: expected at least 2 dimensions (..., L, E), got {a.ndim}")
        self.shapes = (q.shape, k.shape, v.shape)
        # fewer dimensions broadcast as in torch's matmul: size-1 dims in front
        nd = max(q.ndim, k.ndim, v.ndim)
        if not q.ndim == k.ndim == v.ndim:
            q, k, v = (a.reshape((1,) * (nd - a.ndim) + a.shape) for a in (q, k, v))
        self.batch = q.shape[:-3]
        if not self.batch == k.shape[:-3] == v.shape[:-3]:  # (the common case skips this)
            try:
                self.batch = np.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3])
            except ValueError:
                raise ValueError(f"query, key, value: batch dimensions {q.shape[:-3]}, "
                                 f"{k.shape[:-3]}, {v.shape[:-3]} do not broadcast") from None
        self.q, self.k, self.v = (_to4d(a, self.batch) for a in (q, k, v))
        hq, hk = self.q.shape[1], self.k.shape[1]
        if hk != hq and not enable_gqa:
            if hk != 1:
                raise ValueError(f"key: {hk} heads but query has {hq}; "
                                 "pass enable_gqa=True for grouped-query attention")
            # torch broadcasts a single head; so do we (stride 0, no copy)
            self.k = np.broadcast_to(self.k, (self.k.shape[0], hq) + self.k.shape[2:])
            self.v = np.broadcast_to(self.v, (self.v.shape[0], hq) + self.v.shape[2:])
        self.L, self.S = self.q.shape[2], self.k.shape[2]
        self.lead = self.batch + (q.shape[-3],) if q.ndim >= 3 else ()
        self.opts = self._options(attn_mask, dropout_p, is_causal, scale, causal_alignment,
                                  window, alibi_slopes, softcap, sinks, dropout_seed,
                                  dropout_offset, num_threads, path)
        self.opts.precision = precision_code(precision)

    # ----------------------------------------------------------- options
    def _options(self, attn_mask, dropout_p, is_causal, scale, causal_alignment, window,
                 alibi_slopes, softcap, sinks, dropout_seed, dropout_offset, num_threads, path):
        o = S.attn_sdpa_opts()
        self.keep = []
        self.drop_all = dropout_p == 1.0  # torch accepts p = 1: every weight dropped
        if self.drop_all:
            dropout_p = 0.0
        o.scale = _fast.scale_option(scale)
        if causal_alignment not in _ALIGNMENTS:
            raise ValueError(f"causal_alignment: must be 'top_left' or 'bottom_right', "
                             f"got {causal_alignment!r}")
        o.causal = _ALIGNMENTS[causal_alignment] if is_causal else S.CAUSAL_NONE
        masks = attn_mask if isinstance(attn_mask, tuple) else (attn_mask,)
        if len(masks) > S.SDPA_MAX_MASKS:
            raise ValueError(f"attn_mask: at most {S.SDPA_MAX_MASKS} masks, got {len(masks)}")
        # the caller's masks (None kept, for gradients by position) and
        # the opts slot each given one takes
        self.masks = [None if m is None else _tensor.mask(m, "attn_mask") for m in masks]
        self.slots = {}
        pointers = []
        for i, m in enumerate(self.masks):
            if m is not None:
                self.slots[i] = len(pointers)
                pointers.append(self._pointer(self._mask4d(m), "attn_mask"))
        self.mask_pointers = pointers
        for i, ptr in enumerate(pointers):
            o.mask[i] = ptr
        q, v = self.q.shape, self.v.shape
        o.num_threads = _fast.threads_for(num_threads,
                                          q[0] * q[1] * self.L * self.S * (q[3] + v[3]))
        if path not in _PATHS:
            raise ValueError(f"path: must be one of {', '.join(_PATHS)}, got {path!r}")
        o.path = _PATHS[path]
        if window is not None:
            left, right = window
            o.window.enabled = True
            o.window.left = window_side(left, "window left")
            o.window.right = window_side(right, "window right")
        if alibi_slopes is not None:
            slopes = _tensor.float32(alibi_slopes, "alibi_slopes")
            if slopes.ndim > 2:
                slopes = _merge_leading(np.broadcast_to(slopes, self.lead), 2)
            o.alibi_slopes = self._pointer(slopes, "alibi_slopes")
        if softcap:
            o.softcap = float(softcap)
        self.sinks = None
        if sinks is not None:
            self.sinks = _tensor.float32(sinks, "sinks")
            o.sinks = self._pointer(self.sinks, "sinks")
        self.dropout_seed = 0
        if dropout_p or dropout_seed is not None or type(dropout_offset) is not int or dropout_offset:
            o.dropout_p = float(dropout_p)
            if dropout_seed is None:
                dropout_seed = secrets.randbits(63) if dropout_p else 0
            self.dropout_seed = uint64(dropout_seed, "dropout_seed")
            o.dropout_seed = self.dropout_seed
            o.dropout_offset = uint64(dropout_offset, "dropout_offset")
        return o


    def _mask4d(self, m):
        full = self.batch + (self.q.shape[1], self.L, self.S)
        try:
            m = np.broadcast_to(m, full)
        except ValueError:
            raise ValueError(f"attn_mask: shape {m.shape} does not broadcast to "
                             f"{self.lead + (self.L, self.S)}") from None
        return _merge_leading(m, 4) if m.ndim > 4 else m

    def mask_gradients(self):
        """Point grad_mask at a new array and return a function giving the
        gradient of each float mask in its own shape (None for bool masks),
        after the backward ran. One float mask whose dimensions line up with
        the library's (B, H, L, S) goes as it is (the library sums over its
        size-1 dimensions); otherwise the library writes the full
        (B, H, L, S) gradient and NumPy sums it."""
        floats = [i for i, m in enumerate(self.masks) if m is not None and m.dtype != np.bool_]
        if not floats:
            raise TypeError("attn_mask: a gradient needs a floating-point mask, got "
                            + (", ".join(str(m.dtype) for m in self.masks if m is not None)
                               or "none"))
        first = floats[0]
        slot = self.slots[first]
        if slot:  # masks commute: the differentiated one goes first
            self.opts.mask[0] = self.mask_pointers[slot]
            self.opts.mask[slot] = self.mask_pointers[0]
        m = self.masks[first]
        raw = len(floats) == 1 and m.ndim <= 4 and len(self.batch) <= 1 and m.ndim >= 1
        if raw:
            self.opts.mask[0] = self._pointer(m, "attn_mask")
            grad = np.empty(m.shape, np.float32)
        else:
            grad = np.empty(self.q.shape[:2] + (self.L, self.S), np.float32)
        self.set_output("grad_mask", grad, "grad_mask")

        def unbroadcast():
            full = None if raw else grad.reshape(self.lead + (self.L, self.S))
            return [None if a is None or a.dtype == np.bool_ else
                    grad if raw else _sum_to(full, a.shape) for a in self.masks]
        return unbroadcast

    def _pointer(self, a, name):
        t = _tensor.view(a, name)
        self.keep.append(t)
        return C.pointer(t)

    def set_output(self, field, a, name):
        """Point an optional output field of the opts (grad_sinks,
        softmax_stats) at the array a."""
        setattr(self.opts, field, self._pointer(a, name))

    # ---------------------------------------------------------- outputs
    def out_shape(self, last):
        """(B, Hq, L[, last]) in the caller's leading shape."""
        return self.lead + (self.L,) + ((last,) if last is not None else ())

    def as4d(self, a, in_place=False):
        """A (lead..., L[, X]) output array as the library's (B, Hq, L[, X]) view
        (in_place: a view of a, never a copy; an error when impossible)."""
        shape = self.q.shape[:2] + a.shape[len(self.lead):]
        if not in_place:
            return a.reshape(shape)
        v = a.view()
        try:
            v.shape = shape
        except AttributeError:
            raise ValueError("out: its strides cannot be viewed as the library's (B, H, L, D) "
                             "without a copy") from None
        if not _tensor.passes_as_is(v):
            raise ValueError("out: needs float32/float16 elements with whole-element, "
                             "positive strides")
        return v
