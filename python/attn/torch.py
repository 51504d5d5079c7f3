"""PyTorch front end: attn's kernels inside autograd.

    import attn.torch
    out = attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    mha = attn.torch.MultiheadAttention(512, 8)      # drop-in for nn.MultiheadAttention

CPU tensors only. float32 tensors reach the library without a copy (their
buffers are handed over with torch's element strides, via Tensor.numpy());
other floating dtypes are cast to float32 inside the graph and results cast
back, so gradients keep the caller's dtype.
"""
import torch
from torch import nn

from . import _features
from .mha import MultiheadAttention as _AttnMHA
from .sdpa import scaled_dot_product_attention as _sdpa
from .sdpa import scaled_dot_product_attention_backward as _sdpa_backward

__all__ = ["MultiheadAttention", "scaled_dot_product_attention"]


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


def _mask(m):
    """A mask as the library takes it: bool as is, floats as float32 (uint8
    masks, deprecated in torch, as bool)."""
    if m is None:
        return None
    if m.dtype == torch.uint8:
        return m.bool()
    return m if m.dtype == torch.bool else m.detach().float()


def _seed():
    """A dropout key from torch's generator, so torch.manual_seed repeats it."""
    return int(torch.randint(0, 2**62, (), dtype=torch.int64))


# --------------------------------------------------------------------- SDPA
class _SdpaFunction(torch.autograd.Function):
    """Forward saves what the backward needs: inputs, out and the LSE (or,
    when the library has them, the softmax stats: exact where a rounded LSE
    is not). Masks, slopes and options are not differentiated."""

    @staticmethod
    def forward(ctx, query, key, value, mask0, mask1, sinks, options):
        use_stats = _features.supported("softmax_stats")
        res = _sdpa(_numpy(query), _numpy(key), _numpy(value), (_numpy(mask0), _numpy(mask1)),
                    sinks=_numpy(sinks), return_lse=True, return_softmax_stats=use_stats,
                    need_weights=options.pop("need_weights"), **options)
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
        grads = _sdpa_backward(_numpy(grad_out), _numpy(query), _numpy(key), _numpy(value),
                               _numpy(out), None if stats is not None else _numpy(lse),
                               (_numpy(mask0), _numpy(mask1)), softmax_stats=_numpy(stats),
                               needs_grad=ctx.needs_input_grad[:3], sinks=_numpy(sinks),
                               **ctx.options)
        dq, dk, dv = (torch.from_numpy(g) if g is not None else None for g in grads[:3])
        dsinks = torch.from_numpy(grads[3]) if sinks is not None and ctx.needs_input_grad[5] \
            else None
        return dq, dk, dv, None, None, dsinks, None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *,
                                 causal_alignment="top_left", return_lse=False,
                                 need_weights=False, window=None, alibi_slopes=None,
                                 softcap=0.0, sinks=None, num_threads=None, path="auto"):
    """torch.nn.functional.scaled_dot_product_attention (torch >= 2.5
    signature) on attn's kernels, differentiable in query, key, value (and
    sinks). Keyword extras as attn.scaled_dot_product_attention (attn_mask
    may be a pair of masks); return_lse / need_weights append the
    (non-differentiable) LSE / weights. Masks get no gradient."""
    dtype = query.dtype
    masks = attn_mask if isinstance(attn_mask, tuple) else (attn_mask, None)
    if len(masks) != 2:
        raise ValueError(f"attn_mask: at most 2 masks, got {len(masks)}")
    options = dict(dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa,
                   causal_alignment=causal_alignment, window=window,
                   alibi_slopes=_numpy(alibi_slopes), softcap=softcap,
                   dropout_seed=_seed() if dropout_p else None, num_threads=num_threads,
                   path=path, need_weights=need_weights)
    res = _SdpaFunction.apply(_float32(query), _float32(key), _float32(value), _mask(masks[0]),
                              _mask(masks[1]), _float32(sinks), options)
    out = res[0].to(dtype)
    extra = ((res[1],) if return_lse else ()) + ((res[2],) if need_weights else ())
    return (out, *extra) if extra else out


# ---------------------------------------------------------------------- MHA
class _MhaFunction(torch.autograd.Function):
    """attn_mha_forward / attn_mha_backward with the parameters as inputs.

    The C module holds a copy of the parameters: the forward and the backward
    each copy the current values in first, so the module may be called
    several times before one backward. The backward recomputes the forward's
    activations inside the library, so the graph keeps only the inputs."""

    @staticmethod
    def forward(ctx, c_module, call, query, key, value, *params):
        _load_params(c_module, params)
        q, k, v = _numpy(query), _numpy(key), _numpy(value)
        if call["self_attention"]:
            k = v = q
        out, weights = c_module.forward(q, k, v, call["key_padding_mask"], call["need_weights"],
                                        call["attn_mask"], call["average_attn_weights"],
                                        call["is_causal"], dropout_seed=call["dropout_seed"])
        ctx.c_module, ctx.call = c_module, call
        ctx.save_for_backward(query, key, value, *params)
        out = torch.from_numpy(out)
        if weights is None:
            return out
        weights = torch.from_numpy(weights)
        ctx.mark_non_differentiable(weights)
        return out, weights

    @staticmethod
    def backward(ctx, grad_out, *_):
        m, call = ctx.c_module, ctx.call
        query, key, value, *params = ctx.saved_tensors
        _load_params(m, params)
        m.zero_grad()
        q, k, v = _numpy(query), _numpy(key), _numpy(value)
        if call["self_attention"]:
            k = v = q
        needs = ctx.needs_input_grad[2:5]
        dq, dk, dv = m.backward(_numpy(grad_out), q, k, v, call["key_padding_mask"],
                                call["attn_mask"], call["is_causal"], needs_input_grad=needs,
                                dropout_seed=call["dropout_seed"])
        grads = [torch.from_numpy(g.copy()) if want else None
                 for (_, g), want in zip(m.named_grads(), ctx.needs_input_grad[5:])]
        inputs = [torch.from_numpy(g) if g is not None else None for g in (dq, dk, dv)]
        return (None, None, *inputs, *grads)


def _load_params(c_module, params):
    for (_, dst), src in zip(c_module.named_parameters(), params):
        dst[...] = _numpy(src)


class MultiheadAttention(nn.MultiheadAttention):
    """nn.MultiheadAttention computed by attn: same constructor, parameters,
    initialisation, state_dict and forward; trains through attn's backward.

    Differences: the returned weights are not differentiable (and, in
    training with dropout, are those before dropout); a query row that sees
    no key gives out_proj.bias instead of NaN; is_causal=True adds the
    causal mask (torch 2.x's meaning of the hint). One instance is not meant
    to run in two threads at once: its C copy of the parameters is shared."""

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        c_module = self._attn_module()
        c_module.training = self.training
        call = dict(self_attention=key is query and value is query,
                    key_padding_mask=_numpy(_mask(key_padding_mask)),
                    attn_mask=_numpy(_mask(attn_mask)), need_weights=need_weights,
                    average_attn_weights=average_attn_weights, is_causal=is_causal,
                    dropout_seed=_seed() if self.training and self.dropout else None)
        named = dict(self.named_parameters())
        params = [_float32(named[name]) for name, _ in c_module.named_parameters()]
        dtype = query.dtype
        res = _MhaFunction.apply(c_module, call, _float32(query), _float32(key),
                                 _float32(value), *params)
        if need_weights:
            return res[0].to(dtype), res[1].to(dtype)
        return res.to(dtype), None

    def _attn_module(self):
        """The C module with this module's configuration (made once; the
        parameters are copied in on every call)."""
        m = self.__dict__.get("_attn_c")
        if m is None:
            m = _AttnMHA(self.embed_dim, self.num_heads, self.dropout,
                         bias=self.in_proj_bias is not None, add_bias_kv=self.bias_k is not None,
                         add_zero_attn=self.add_zero_attn, kdim=self.kdim, vdim=self.vdim,
                         batch_first=self.batch_first)
            self.__dict__["_attn_c"] = m
        return m

    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else \
            self.__dict__.copy()
        state = dict(state)
        state.pop("_attn_c", None)  # a C handle: made again on first use
        return state
