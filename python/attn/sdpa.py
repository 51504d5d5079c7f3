"""Scaled dot-product attention on NumPy arrays, torch's signature.

    out = scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                                       is_causal=False, scale=None, enable_gqa=False)

mirrors torch.nn.functional.scaled_dot_product_attention (torch >= 2.5): q
(..., Hq, L, E), k (..., Hkv, S, E), v (..., Hkv, S, Ev) -> (..., Hq, L, Ev);
bool masks True = may attend, float masks added to the scores. Computation is
float32; outputs are new float32 arrays, except that float16 inputs stay
float16 (no copy) and give float16 results, as torch's do: the float32
results on the same values, rounded to nearest even.
"""
import ctypes as C
import math

import numpy as np

from . import _fast
from . import _structs as S
from . import _tensor
from ._errors import check, new_error
from ._lib import lib
from ._sdpa_call import SdpaCall, _sum_to, integer, precision_code


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 causal_alignment="top_left", return_lse=False,
                                 need_weights=False, return_softmax_stats=False, window=None,
                                 alibi_slopes=None, softcap=0.0, sinks=None, dropout_seed=None,
                                 dropout_offset=0, num_threads=None, path="auto", out=None,
                                 precision="exact"):
    """Attention output (..., Hq, L, Ev): float32, or float16 for a float16 query.

    attn_mask may also be a tuple of two masks (say a key-padding mask and a
    causal or bias mask), combined without materialising their sum.

    Beyond torch's arguments (keyword-only):
      causal_alignment  "top_left" (torch: query i sees keys j <= i) or
                        "bottom_right" (FlashAttention: j <= i + S - L)
      return_lse        also return the log-sum-exp (..., Hq, L) of each row
      need_weights      also return the softmax weights (..., Hq, L, S)
      return_softmax_stats  also return (..., Hq, L, 2): each row's max and
                        log-sum, what the backward reads for exact gradients
      window=(left, right)  sliding window (None or -1: unbounded side)
      alibi_slopes (Hq,) or (..., Hq), softcap > 0, sinks (Hq,)
      dropout_seed, dropout_offset  dropout's counter-based RNG key (drawn at
                        random when None; pass the same to the backward)
      num_threads       threads for this call (default: set_num_threads)
      path              "auto", "reference" or "fused"
      precision         "exact" (default: float32 arithmetic, 16-bit inputs
                        widened exactly) or "bf16" (bfloat16 products with
                        float32 accumulation, as torch's and FlashAttention's
                        bfloat16 kernels: README "bfloat16 products")
      out               an array to write the output into (its shape and
                        dtype, any strides: a (B, N, H, D) buffer's
                        transposed view, say), returned as the output
    Returns out, followed by lse, weights and stats in that order for the ones
    asked for. A row that sees no key gives 0 (torch gives NaN).
    """
    if (out is None and type(query) is np.ndarray and type(key) is np.ndarray and
            type(value) is np.ndarray and _fast.applies(
                query.shape, key.shape, value.shape, attn_mask, dropout_p, scale,
                return_lse or need_weights or return_softmax_stats or window is not None or
                alibi_slopes is not None or softcap or sinks is not None or
                dropout_seed is not None or dropout_offset or path != "auto" or
                causal_alignment not in _CAUSAL) and
            _plain(query) and _plain(key) and _plain(value)):
        result = np.empty(query.shape[:3] + value.shape[3:], np.float32)
        _fast.forward(_fast.triple(query), _fast.triple(key), _fast.triple(value),
                      _fast.triple(result),
                      None if scale is None else float(scale),
                      _CAUSAL[causal_alignment] if is_causal else 0, num_threads,
                      (query, key, value, result), precision=precision_code(precision))
        return result
    call = SdpaCall(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                    causal_alignment, window, alibi_slopes, softcap, sinks, dropout_seed,
                    dropout_offset, num_threads, path, precision)
    shape, dtype = call.out_shape(call.v.shape[3]), _result_dtype(call.q)
    given_out = out is not None
    if not given_out:
        out = np.empty(shape, dtype=dtype)
    elif not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out: expected a {np.dtype(dtype)} array of shape {shape}, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} "
                         f"{getattr(out, 'shape', '')}")
    out_t = _tensor.view(call.as4d(out, in_place=True) if given_out else call.as4d(out), "out")
    lse = weights = stats = None
    if return_lse:
        lse = np.empty(call.out_shape(None), dtype=np.float32)
    if need_weights:
        weights = np.empty(call.out_shape(call.S), dtype=np.float32)
    if return_softmax_stats:
        stats = np.empty(call.out_shape(2), dtype=np.float32)
        call.set_output("softmax_stats", call.as4d(stats), "softmax_stats")
    err = new_error()
    check(lib.attn_sdpa(_view(call.q, "query"), _view(call.k, "key"), _view(call.v, "value"),
                        C.byref(out_t), _out(call, lse, "lse"), _out(call, weights, "weights"),
                        C.byref(call.opts), C.byref(err)), err)
    if call.drop_all:  # dropout_p = 1: every weight dropped (lse, weights: before dropout)
        out[...] = 0
    extra = tuple(a for a, wanted in ((lse, return_lse), (weights, need_weights),
                                      (stats, return_softmax_stats)) if wanted)
    return (out,) + extra if extra else out


def scaled_dot_product_attention_backward(grad_out, query, key, value, out=None, lse=None,
                                          attn_mask=None, dropout_p=0.0, is_causal=False,
                                          scale=None, enable_gqa=False, *,
                                          causal_alignment="top_left", softmax_stats=None,
                                          needs_grad=(True, True, True), window=None,
                                          alibi_slopes=None, softcap=0.0, sinks=None,
                                          dropout_seed=None, dropout_offset=0, num_threads=None,
                                          path="auto", grad_attn_mask=False, precision="exact"):
    """Gradients (dq, dk, dv) of <grad_out, attention(q, k, v)>, shaped like
    query, key and value (summed over broadcast dimensions), float32 (float16
    for a float16 input, summed in float32 first where it was broadcast).

    Same arguments as the forward, plus grad_out (..., Hq, L, Ev) and what the
    forward returned: out and lse (each optional, recomputed when missing) or
    softmax_stats (preferred: exact where a rounded lse is not). needs_grad
    says which of dq, dk, dv to compute (None for the others). With sinks,
    the gradient of the sinks is appended. With grad_attn_mask=True, the
    gradient of the float attn_mask (a learned bias), in its own shape, comes
    last (a list, None for bool masks, when attn_mask is a tuple). With
    dropout, pass the forward's dropout_seed and dropout_offset; precision
    as the forward's.
    """
    if dropout_p and dropout_seed is None:
        raise ValueError("dropout_seed: the backward of dropout needs the forward's seed")
    call = SdpaCall(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                    causal_alignment, window, alibi_slopes, softcap, sinks, dropout_seed,
                    dropout_offset, num_threads, path, precision)
    dout = _tensor.floating(grad_out, "grad_out")
    if call.drop_all:  # dropout_p = 1: the output is constant, every gradient 0
        dout = np.zeros_like(dout)
    if dout.shape != call.out_shape(call.v.shape[3]):
        raise ValueError(f"grad_out: shape {dout.shape}, expected the output's "
                         f"{call.out_shape(call.v.shape[3])}")
    if softmax_stats is not None:
        call.set_output("softmax_stats", call.as4d(_tensor.float32(softmax_stats,
                                                                   "softmax_stats")),
                        "softmax_stats")
    # a broadcast input's gradient is summed (in float32) before it is rounded
    grads = [np.empty(a.shape, dtype=_result_dtype(a) if math.prod(shape) == a.size
                      else np.float32) if wanted else None
             for a, shape, wanted in zip((call.q, call.k, call.v), call.shapes, needs_grad)]
    dsinks = None
    if call.sinks is not None:
        dsinks = np.empty(call.sinks.shape, dtype=np.float32)
        call.set_output("grad_sinks", dsinks, "grad_sinks")
    mask_grads = call.mask_gradients() if grad_attn_mask else None
    err = new_error()
    check(lib.attn_sdpa_backward(
        _view(call.q, "query"), _view(call.k, "key"), _view(call.v, "value"),
        _in(call, out, "out", _tensor.floating), _in(call, lse, "lse", _tensor.float32),
        _view(call.as4d(dout), "grad_out"),
        *(_view(g, n) if g is not None else None
          for g, n in zip(grads, ("grad_query", "grad_key", "grad_value"))),
        C.byref(call.opts), C.byref(err)), err)
    result = tuple(_tensor.round_to(_unbroadcast(g, call.batch, shape), _result_dtype(a))
                   if g is not None else None
                   for g, a, shape in zip(grads, (call.q, call.k, call.v), call.shapes))
    if dsinks is not None:
        result += (dsinks,)
    if mask_grads is not None:
        dmasks = mask_grads()
        result += (tuple(dmasks) if isinstance(attn_mask, tuple) else dmasks[0],)
    return result


_CAUSAL = {"top_left": S.CAUSAL_TOP_LEFT, "bottom_right": S.CAUSAL_BOTTOM_RIGHT}


_F32 = np.dtype(np.float32)


def _plain(a):
    """A float32 array the library reads as it is (NumPy's aligned flag
    covers the strides: each a whole number of elements)."""
    return a.dtype is _F32 and a.flags.aligned


def _view(a, name):
    return C.byref(_tensor.view(a, name))


def _out(call, a, name):
    return _view(call.as4d(a), name) if a is not None else None


def _in(call, a, name, convert):
    return _view(call.as4d(convert(a, name)), name) if a is not None else None


def _result_dtype(a):
    """Results follow a 16-bit input's dtype (as torch's); else float32."""
    return a.dtype if a.dtype == np.float16 or _tensor.is_bf16(a) else np.dtype(np.float32)


def _unbroadcast(g, batch, shape):
    """A (B, H, N, X) gradient summed back to an input's own shape (torch
    autograd does the same for broadcast inputs)."""
    return _sum_to(g.reshape(batch + g.shape[1:]), shape)


def alibi_slopes(heads):
    """The standard ALiBi slopes for `heads` heads (Press et al.; BLOOM's and
    FlashAttention's), float32 (heads,): pass as alibi_slopes=."""
    heads = integer(heads, "heads")
    if heads < 0:
        raise ValueError(f"heads: must be >= 0, got {heads}")
    out = np.empty(heads, dtype=np.float32)
    err = new_error()
    check(lib.attn_alibi_slopes(heads, out.ctypes.data_as(C.POINTER(C.c_float)),
                                C.byref(err)), err)
    return out
