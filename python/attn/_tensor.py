"""NumPy arrays as attn_tensor views.

attn_tensor holds a data pointer plus a shape and an ELEMENT stride per
dimension, so any float32, float16 (or bool) NumPy view whose byte strides are whole
elements passes without a copy: transposes, slices, broadcasts (stride 0) and,
for inputs, reversed axes (negative strides). Anything else (other dtypes,
unaligned data, strides that split an element) is converted once.
"""
import ctypes as C

import numpy as np

from . import _structs as S

# Called as observer(name, array, tensor) for every view handed to the library;
# tests use it to check that no copy was made.
observer = None

_DTYPES = {np.dtype(np.float32): S.F32, np.dtype(np.bool_): S.BOOL,
           np.dtype(np.float16): S.F16}
# bfloat16, which NumPy lacks: its bits as uint16 under a dtype that says so
# (torch bfloat16 tensors arrive as such views; slices and transposes keep it)
BF16 = np.dtype(np.uint16, metadata={"attn_dtype": "bfloat16"})


def is_bf16(a):
    m = a.dtype.metadata
    return m is not None and m.get("attn_dtype") == "bfloat16"


def _code(a):
    return S.BF16 if is_bf16(a) else _DTYPES[a.dtype]


def widen_bf16(a):
    """A bfloat16 array's values as float32 (exact)."""
    return (np.asarray(a, np.uint32) << 16).view(np.float32)


def round_to(a, dtype):
    """A float32 array as `dtype` (float32, float16 or BF16), rounded to
    nearest even as the library and torch's Tensor.to round."""
    if not (dtype == np.uint16 and dtype.metadata):
        return a.astype(dtype, copy=False)
    if is_bf16(a):
        return a
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    even = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + even) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)  # quiet, sign kept
    return rounded.view(BF16)


_SHAPE = C.c_int64 * S.MAX_DIMS


def _passes_as_is(a, negative_ok):
    if (a.dtype not in _DTYPES and not is_bf16(a)) or a.ndim > S.MAX_DIMS or \
            not a.flags.aligned:
        return False
    item = a.itemsize
    for s in a.strides:
        if s % item or (s < 0 and not negative_ok):
            return False
    return True


def passes_as_is(a, negative_ok=False):
    """True when an array reaches the library without a copy (an output
    must not have negative strides)."""
    return _passes_as_is(a, negative_ok)


def _struct(a):
    # one constructor call: setting the fields one by one costs ~10 µs
    item = a.itemsize
    return S.attn_tensor(a.__array_interface__["data"][0] if a.size else None, _code(a),
                         a.ndim, _SHAPE(*a.shape), _SHAPE(*[s // item for s in a.strides]))


def float32(x, name):
    """x as a float32 array: float32 views as they are, other floating dtypes
    converted once. Integer arrays are refused, as torch refuses them."""
    a = np.asarray(x)
    if is_bf16(a):
        return widen_bf16(a)
    if a.dtype.kind != "f":
        raise TypeError(f"{name}: expected a real floating-point array, got dtype {a.dtype}")
    if a.dtype != np.float32 or not _passes_as_is(a, negative_ok=True):
        a = np.ascontiguousarray(a, dtype=np.float32)
    return a


def floating(x, name):
    """x as the library stores it: float16 and bfloat16 (BF16) views as they
    are (the library widens them exactly and computes in float32),
    everything else as float32()."""
    a = np.asarray(x)
    if a.dtype == np.float16 or is_bf16(a):
        return a if _passes_as_is(a, negative_ok=True) else np.ascontiguousarray(a)
    return float32(a, name)


def mask(x, name):
    """A mask array: bool stays bool (one byte per element), floats become float32."""
    a = np.asarray(x)
    if a.dtype == np.bool_:
        return a if _passes_as_is(a, negative_ok=True) else np.ascontiguousarray(a)
    if a.dtype.kind != "f":
        raise TypeError(f"{name}: expected a bool or floating-point mask, got dtype {a.dtype}")
    return float32(a, name)


def view(a, name):
    """The attn_tensor of an array made by float32() or mask() (or a view of one)."""
    if not _passes_as_is(a, negative_ok=True):  # a reshape could not keep the view
        a = np.ascontiguousarray(a)
    t = _struct(a)
    t._array = a  # the buffer lives as long as the view
    if observer is not None:
        observer(name, a, t)
    return t


def output(shape, name, dtype=np.float32):
    """A new float32 (or float16) array and its view, for the library to write."""
    a = np.empty(shape, dtype=dtype)
    return a, view(a, name)


def ref(t):
    """A pointer to a view, or NULL for None."""
    return C.pointer(t) if t is not None else None
