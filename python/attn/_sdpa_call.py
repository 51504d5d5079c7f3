"""Torch-style SDPA arguments turned into attn's 4-D views and attn_sdpa_opts.

torch takes q (..., Hq, L, E), k (..., Hkv, S, E), v (..., Hkv, S, Ev) with
any number of leading batch dimensions that broadcast; attn takes
(B, H, N, D) views. The leading dimensions are broadcast (stride 0) and merged
into B, which costs nothing unless merging needs a copy (rare: dimensions whose
strides do not line up).
"""
import ctypes as C
import secrets

import numpy as np

from . import _structs as S
from . import _tensor
from . import _threads

_ALIGNMENTS = {"top_left": S.CAUSAL_TOP_LEFT, "bottom_right": S.CAUSAL_BOTTOM_RIGHT}
_PATHS = {"auto": S.PATH_AUTO, "reference": S.PATH_REFERENCE, "fused": S.PATH_FUSED}
# torch accepts scale=0 (every score 0); attn reads 0 as "default". The
# smallest subnormal gives the same float32 results: every score rounds to
# (at most) a subnormal, whose exp is exactly 1.
_ZERO_SCALE = float(np.nextafter(np.float32(0), np.float32(1)))


def _merge_leading(a, ndim):
    """a with its leading dimensions merged so it has `ndim` dimensions, as a
    view whenever the strides allow it."""
    k = a.ndim - ndim + 1
    shape = (int(np.prod(a.shape[:k])),) + a.shape[k:]
    try:
        v = a.view()
        v.shape = shape  # raises instead of copying
        return v
    except AttributeError:
        return np.reshape(a, shape)


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
                 dropout_offset=0, num_threads=None, path="auto"):
        q, k, v = (_tensor.floating(x, n) for x, n in ((query, "query"), (key, "key"),
                                                       (value, "value")))
        for a, n in ((q, "query"), (k, "key"), (v, "value")):
            if a.ndim < 2:
                raise ValueError(f"{n}: expected at least 2 dimensions (..., L, E), got {a.ndim}")
        if not q.ndim == k.ndim == v.ndim:
            raise ValueError(f"query, key, value: must have the same number of dimensions, "
                             f"got {q.ndim}, {k.ndim}, {v.ndim}")
        self.shapes = (q.shape, k.shape, v.shape)
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

    # ----------------------------------------------------------- options
    def _options(self, attn_mask, dropout_p, is_causal, scale, causal_alignment, window,
                 alibi_slopes, softcap, sinks, dropout_seed, dropout_offset, num_threads, path):
        o = S.attn_sdpa_opts()
        self.keep = []
        if scale is not None:
            scale = float(scale)
            o.scale = _ZERO_SCALE if scale == 0.0 else scale
            if o.scale == 0.0 and scale != 0.0:
                raise ValueError(f"scale: {scale!r} underflows float32")
        if causal_alignment not in _ALIGNMENTS:
            raise ValueError(f"causal_alignment: must be 'top_left' or 'bottom_right', "
                             f"got {causal_alignment!r}")
        o.causal = _ALIGNMENTS[causal_alignment] if is_causal else S.CAUSAL_NONE
        masks = attn_mask if isinstance(attn_mask, tuple) else (attn_mask,)
        if len(masks) > S.SDPA_MAX_MASKS:
            raise ValueError(f"attn_mask: at most {S.SDPA_MAX_MASKS} masks, got {len(masks)}")
        self.masks = [_tensor.mask(m, "attn_mask") for m in masks if m is not None]
        for i, m in enumerate(self.masks):
            o.mask[i] = self._pointer(self._mask4d(m), "attn_mask")
        o.num_threads = _threads.resolve(num_threads)
        if path not in _PATHS:
            raise ValueError(f"path: must be one of {', '.join(_PATHS)}, got {path!r}")
        o.path = _PATHS[path]
        if window is not None:
            left, right = window
            o.window.enabled = True
            o.window.left = -1 if left is None else int(left)
            o.window.right = -1 if right is None else int(right)
        if alibi_slopes is not None:
            slopes = _tensor.float32(alibi_slopes, "alibi_slopes")
            if slopes.ndim > 2:
                slopes = _merge_leading(np.broadcast_to(slopes, self.lead), 2)
            o.alibi_slopes = self._pointer(slopes, "alibi_slopes")
        o.softcap = float(softcap)
        self.sinks = None
        if sinks is not None:
            self.sinks = _tensor.float32(sinks, "sinks")
            o.sinks = self._pointer(self.sinks, "sinks")
        o.dropout_p = float(dropout_p)
        if dropout_seed is None:
            dropout_seed = secrets.randbits(63) if dropout_p else 0
        self.dropout_seed = int(dropout_seed)
        o.dropout_seed = self.dropout_seed
        o.dropout_offset = int(dropout_offset)
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
        floats = [i for i, m in enumerate(self.masks) if m.dtype != np.bool_]
        if not floats:
            raise TypeError("attn_mask: a gradient needs a floating-point mask, got "
                            + (", ".join(str(m.dtype) for m in self.masks) or "none"))
        first = floats[0]
        if first:  # masks commute: the differentiated one goes first
            self.opts.mask[0], self.opts.mask[first] = self.opts.mask[first], self.opts.mask[0]
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
            return [None if a.dtype == np.bool_ else grad if raw else _sum_to(full, a.shape)
                    for a in self.masks]
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

    def as4d(self, a):
        """A (lead..., L[, X]) output array as the library's (B, Hq, L[, X]) view."""
        return a.reshape(self.q.shape[:2] + a.shape[len(self.lead):])
