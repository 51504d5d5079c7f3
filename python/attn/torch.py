"""PyTorch front end: attn's kernels inside autograd.

    import attn.torch
    out = attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    mha = attn.torch.MultiheadAttention(512, 8)      # drop-in for nn.MultiheadAttention

CPU tensors only. float32 tensors reach the library without a copy (their
buffers are handed over with torch's element strides, via Tensor.numpy());
other floating dtypes are cast to float32 inside the graph and results cast
back, so gradients keep the caller's dtype.
"""
import math

import numpy as np
import torch
from torch import nn

from . import _fast
from . import _features
from . import _structs
from . import _threads as _attn_threads
from ._sdpa_call import precision_code
from .sdpa import scaled_dot_product_attention as _sdpa
from .sdpa import scaled_dot_product_attention_backward as _sdpa_backward

__all__ = ["MultiheadAttention", "alibi_slopes", "scaled_dot_product_attention"]


def alibi_slopes(heads):
    """The standard ALiBi slopes (heads,) as a float32 tensor."""
    from .sdpa import alibi_slopes as slopes
    return torch.from_numpy(slopes(heads))


def _numpy(t):
    """A NumPy view of a CPU tensor sharing its memory (None passes through)."""
    if t is None or not isinstance(t, torch.Tensor):
        return t
    if t.device.type != "cpu":
        raise ValueError(f"attn.torch: tensors must be on the CPU, got {t.device}")
    return t.detach().numpy()


def _float32(t):
    """t as float32 inside the autograd graph (no copy when it already is)."""
    if t is None:
        return None
    if not t.is_floating_point():
        raise TypeError(f"attn.torch: expected a floating-point tensor, got {t.dtype}")
    return t if t.dtype == torch.float32 else t.float()


def _mask(m, name="attn_mask"):
    """An SDPA mask as the library takes it: bool as is, floats as float32
    inside the graph (a learned bias gets its gradient). Integer masks are
    refused, as torch refuses them: adding a 0/1 mask would mask nothing."""
    if m is None:
        return None
    if m.dtype == torch.bool:
        return m
    if not m.is_floating_point():
        raise TypeError(f"{name}: expected a bool or floating-point mask, got {m.dtype} "
                        "(for a 0/1 mask, pass mask.bool())")
    return m if m.dtype == torch.float32 else m.float()


def _mha_mask(m, name):
    """A torch-MHA mask: uint8 (deprecated in torch, still taken by 1.13's
    nn.MultiheadAttention) read as bool, else as _mask."""
    return m.bool() if m is not None and m.dtype == torch.uint8 else _mask(m, name)


def _threads(num_threads):
    """Threads for a call: num_threads=, else attn.set_num_threads's, else
    torch's intra-op count (torch.set_num_threads)."""
    if num_threads is not None:
        return num_threads
    return _attn_threads.resolve(None) or torch.get_num_threads()


_DOUBLE_BACKWARD = (b"attn.torch: double backward is not supported (attn's backward is not "
                    b"itself differentiable); use torch's math attention for higher-order "
                    b"gradients")


def _once_differentiable(grads):
    """The backward's results, made to raise a clear error if they are
    differentiated again (create_graph=True, then a second backward)."""
    if not torch.is_grad_enabled():
        return grads
    present = [g for g in grads if g is not None]
    if not present:
        return grads
    fake = [g.detach().requires_grad_() for g in present]
    wrapped = iter(torch._C._functions.DelayedError(_DOUBLE_BACKWARD, len(fake))(*fake))
    out = tuple(next(wrapped) if g is not None else None for g in grads)
    return out


_CAUSAL = {"top_left": _structs.CAUSAL_TOP_LEFT, "bottom_right": _structs.CAUSAL_BOTTOM_RIGHT}


def _plain(t):
    """A float32 CPU tensor the library reads as it is (forward, no grad)."""
    return (type(t) is torch.Tensor and t.dtype is torch.float32 and t.is_cpu and
            t.layout is torch.strided)


def _triple(t):
    return t.data_ptr(), t.shape, t.stride()


def _seed():
    """A dropout key from torch's generator, so torch.manual_seed repeats it."""
    return int(torch.randint(0, 2**62, (), dtype=torch.int64))


# --------------------------------------------------------------------- SDPA
class _SdpaFunction(torch.autograd.Function):
    """Forward saves what the backward needs: inputs, out and the LSE (or,
    when the library has them, the softmax stats: exact where a rounded LSE
    is not). Float masks (learned biases) and sinks are differentiated;
    slopes and options are not."""

    @staticmethod
    def forward(ctx, query, key, value, mask0, mask1, sinks, options):
        if options.get("plain"):  # no mask, variant or extra output: the short road
            b, h, n, _ = query.shape  # plain tuples: slicing a torch.Size costs µs
            out = torch.empty((b, h, n, value.shape[3]))
            lse, stats = torch.empty((b, h, n)), torch.empty((b, h, n, 2))
            _fast.forward(*(_triple(t) for t in (query, key, value, out)), options["scale"],
                          options["causal"], options["num_threads"], (query, key, value, out),
                          _triple(lse), _triple(stats), options["precision"])
            ctx.options = options
            ctx.save_for_backward(query, key, value, None, None, None, out, lse, stats)
            ctx.mark_non_differentiable(lse)
            return out, lse
        use_stats = _features.supported("softmax_stats")
        options = dict(options)  # the caller's dict is reused (torch.jit.trace replays it)
        out_buffer = None
        if options.pop("bnhd_out", False):  # out in a (B, N, H, Dv) buffer (flash-attn's layout)
            B, H, N = query.shape[:3]
            out_buffer = np.empty((B, N, H, value.shape[-1]), np.float32).swapaxes(1, 2)
        res = _sdpa(_numpy(query), _numpy(key), _numpy(value), (_numpy(mask0), _numpy(mask1)),
                    sinks=_numpy(sinks), return_lse=True, return_softmax_stats=use_stats,
                    need_weights=options.pop("need_weights"), out=out_buffer, **options)
        out, lse = torch.from_numpy(res[0]), torch.from_numpy(res[1])
        weights = torch.from_numpy(res[2]) if len(res) > 2 + use_stats else None
        stats = torch.from_numpy(res[-1]) if use_stats else None
        ctx.options = options
        ctx.save_for_backward(query, key, value, mask0, mask1, sinks, out, lse, stats)
        extra = [lse] + ([weights] if weights is not None else [])
        ctx.mark_non_differentiable(*extra)
        return (out, *extra)

    @staticmethod
    def backward(ctx, grad_out, *_):
        query, key, value, mask0, mask1, sinks, out, lse, stats = ctx.saved_tensors
        if ctx.options.get("plain"):
            grads = [torch.empty_like(t) if need else None
                     for t, need in zip((query, key, value), ctx.needs_input_grad)]
            o = ctx.options
            _fast.backward(*(_triple(t) for t in (query, key, value, out, stats, grad_out)),
                           [None if g is None else _triple(g) for g in grads], o["scale"],
                           o["causal"], o["num_threads"], o["precision"])
            return _once_differentiable(tuple(grads) + (None, None, None)) + (None,)
        want_masks = ctx.needs_input_grad[3] or ctx.needs_input_grad[4]
        grads = _sdpa_backward(_numpy(grad_out), _numpy(query), _numpy(key), _numpy(value),
                               _numpy(out), None if stats is not None else _numpy(lse),
                               (_numpy(mask0), _numpy(mask1)), softmax_stats=_numpy(stats),
                               needs_grad=ctx.needs_input_grad[:3], sinks=_numpy(sinks),
                               grad_attn_mask=want_masks, **ctx.options)
        dq, dk, dv = (torch.from_numpy(g) if g is not None else None for g in grads[:3])
        dsinks = torch.from_numpy(grads[3]) if sinks is not None and ctx.needs_input_grad[5] \
            else None
        dm = [torch.from_numpy(g) if g is not None and need else None
              for g, need in zip(grads[-1], ctx.needs_input_grad[3:5])] if want_masks \
            else [None, None]
        return _once_differentiable((dq, dk, dv, dm[0], dm[1], dsinks)) + (None,)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 causal_alignment="top_left", return_lse=False,
                                 need_weights=False, window=None, alibi_slopes=None,
                                 softcap=0.0, sinks=None, num_threads=None, path="auto",
                                 precision="exact", _bnhd_out=False):
    """torch.nn.functional.scaled_dot_product_attention (torch >= 2.5
    signature) on attn's kernels, differentiable in query, key, value (and
    sinks, and float masks: a learned bias). Keyword extras as
    attn.scaled_dot_product_attention (attn_mask may be a pair of masks);
    return_lse / need_weights append the (non-differentiable) LSE /
    weights. Threads: num_threads=, else attn.set_num_threads's, else
    torch.get_num_threads(). precision="bf16": bfloat16 products with
    float32 accumulation (as torch's bfloat16 kernels); the default "exact"
    computes in float32 whatever the inputs' dtype."""
    dtype = query.dtype
    query, key, value = _float32(query), _float32(key), _float32(value)
    if (_fast.applies(query.shape, key.shape, value.shape, attn_mask, dropout_p, scale,
                      need_weights or window is not None or alibi_slopes is not None or
                      softcap or sinks is not None or path != "auto" or _bnhd_out or
                      causal_alignment not in _CAUSAL) and
            all(_plain(t) for t in (query, key, value))):  # the short road
        scale = None if scale is None else float(scale)
        causal = _CAUSAL[causal_alignment] if is_causal else 0
        if not return_lse and not (torch.is_grad_enabled() and (
                query.requires_grad or key.requires_grad or value.requires_grad)):
            b, h, n, _ = query.shape  # no graph: no Function
            out = torch.empty((b, h, n, value.shape[3]))
            _fast.forward(_triple(query), _triple(key), _triple(value), _triple(out), scale,
                          causal, _threads(num_threads), (query, key, value, out),
                          precision=precision_code(precision))
            return out if dtype is torch.float32 else out.to(dtype)
        options = dict(plain=True, scale=scale, causal=causal, num_threads=_threads(num_threads),
                       precision=precision_code(precision))
        out, lse = _SdpaFunction.apply(query, key, value, None, None, None, options)
        out = out.to(dtype)
        return (out, lse) if return_lse else out
    masks = attn_mask if isinstance(attn_mask, tuple) else (attn_mask, None)
    if len(masks) != 2:
        raise ValueError(f"attn_mask: at most 2 masks, got {len(masks)}")
    options = dict(dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa,
                   causal_alignment=causal_alignment, window=window,
                   alibi_slopes=_numpy(alibi_slopes), softcap=softcap,
                   dropout_seed=_seed() if dropout_p else None,
                   num_threads=_threads(num_threads), precision=precision,
                   path=path, need_weights=need_weights, bnhd_out=_bnhd_out)
    res = _SdpaFunction.apply(query, key, value, _mask(masks[0]),
                              _mask(masks[1]), _float32(sinks), options)
    out = res[0].to(dtype)
    extra = ((res[1],) if return_lse else ()) + ((res[2],) if need_weights else ())
    return (out, *extra) if extra else out


# ---------------------------------------------------------------------- MHA
def _mha_key_mask(mask, appended, name):
    """torch-MHA mask (bool True = blocked, or float added) as an SDPA mask
    (bool True = may attend, or float), with `appended` always-visible keys
    at the end (bias_k, zero attention)."""
    if mask is None:
        return None
    mask = _mha_mask(mask, name)
    if mask.dtype == torch.bool:
        mask = ~mask
        return nn.functional.pad(mask, (0, appended), value=True) if appended else mask
    return nn.functional.pad(mask, (0, appended), value=0.0) if appended else mask


class MultiheadAttention(nn.MultiheadAttention):
    """nn.MultiheadAttention computed with attn: same constructor, parameters,
    initialisation, state_dict and forward; trains through attn's backward.

    The projections are torch's F.linear on the module's own parameters;
    the attention between them is attn's fused SDPA (autograd Function), fed
    the projections as strided (N, H, L, hd) views without a copy.

    Differences: the returned weights are not differentiable (and, in
    training with dropout, are those before dropout); a query row that sees
    no key gives out_proj.bias instead of NaN; is_causal=True adds the
    causal mask (torch 2.x's meaning of the hint); masks are summed as
    torch >= 2.0 does."""

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        batched = query.dim() == 3
        self_attention = key is query and value is query
        if not batched:  # unbatched (L, E): a batch of one
            query, key, value = (t.unsqueeze(0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:  # (L, N, E) -> (N, L, E) views
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        dtype = query.dtype
        q, k, v = self._project(_float32(query), _float32(key), _float32(value), self_attention)
        N, L, E, H = q.shape[0], q.shape[1], self.embed_dim, self.num_heads
        if self.bias_k is not None:
            k = torch.cat([k, self.bias_k.to(k.dtype).expand(N, 1, E)], dim=1)
            v = torch.cat([v, self.bias_v.to(v.dtype).expand(N, 1, E)], dim=1)
        if self.add_zero_attn:  # a zero key/value row, the same in every head
            k = torch.cat([k, k.new_zeros(N, 1, E)], dim=1)
            v = torch.cat([v, v.new_zeros(N, 1, E)], dim=1)
        S = key.shape[1]
        appended = k.shape[1] - S
        heads = lambda t: t.view(N, t.shape[1], H, E // H).transpose(1, 2)  # noqa: E731
        masks, causal = self._masks(key_padding_mask, attn_mask, is_causal, N, L, S, appended)
        res = scaled_dot_product_attention(
            heads(q), heads(k), heads(v), masks, is_causal=causal,
            dropout_p=self.dropout if self.training else 0.0, need_weights=need_weights)
        out, weights = (res[0], res[1]) if need_weights else (res, None)
        out = nn.functional.linear(out.transpose(1, 2).reshape(N, L, E),
                                   _float32(self.out_proj.weight),
                                   _float32(self.out_proj.bias)).to(dtype)
        if weights is not None:
            weights = (weights.mean(dim=1) if average_attn_weights else weights).to(dtype)
        if not batched:
            return out.squeeze(0), weights.squeeze(0) if weights is not None else None
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _project(self, query, key, value, self_attention):
        """q, k, v in (N, L, E) / (N, S, E), views of one GEMM's output for
        self-attention with packed weights."""
        E = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None,) * 3 if b is None else (_float32(b).chunk(3))
        if self._qkv_same_embed_dim:
            w = _float32(self.in_proj_weight)
            if self_attention:
                qkv = nn.functional.linear(query, w, _float32(b))
                return qkv[..., :E], qkv[..., E:2 * E], qkv[..., 2 * E:]
            wq, wk, wv = w.chunk(3)
        else:
            wq, wk, wv = (_float32(p) for p in (self.q_proj_weight, self.k_proj_weight,
                                                self.v_proj_weight))
        return (nn.functional.linear(query, wq, bq), nn.functional.linear(key, wk, bk),
                nn.functional.linear(value, wv, bv))

    def _masks(self, key_padding_mask, attn_mask, is_causal, N, L, S, appended):
        """The (at most two) SDPA masks and whether SDPA's own top-left causal
        applies (it does when no key is appended: appended keys stay visible)."""
        kpm = _mha_key_mask(key_padding_mask, appended, "key_padding_mask")
        if kpm is not None:
            kpm = kpm.view(N, 1, 1, -1)
        am = attn_mask
        if is_causal and appended:  # the triu mask over the original keys only
            causal_mask = torch.ones(L, S, dtype=torch.bool).triu(1)
            if am is not None:
                am = _mha_mask(am, "attn_mask")
            am = causal_mask if am is None else (am | causal_mask if am.dtype == torch.bool
                                                 else am.masked_fill(causal_mask, -math.inf))
            is_causal = False
        am = _mha_key_mask(am, appended, "attn_mask")
        if am is not None and am.dim() == 3:  # (N·H, L, S) -> (N, H, L, S)
            am = am.view(N, self.num_heads, L, -1)
        return (kpm, am), bool(is_causal)

