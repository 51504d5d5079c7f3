"""The torch half of attn.flash_attn: flash_attn_func through attn.torch's
SDPA Function (autograd included), flash_attn_varlen_func through an
autograd Function over attn_sdpa_varlen and its backward."""
import torch

from . import flash_attn as _flash
from .torch import _float32, _numpy, _once_differentiable, _seed, _threads
from .torch import scaled_dot_product_attention as _sdpa
from .varlen import varlen_attention, varlen_attention_backward


def _bnhd(t, name):
    if t.dim() != 4:
        raise ValueError(f"{name}: expected (batch, seqlen, nheads, headdim), got shape "
                         f"{tuple(t.shape)}")
    return t.transpose(1, 2)


def flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                    alibi_slopes, deterministic, return_attn_probs, precision):
    res = _sdpa(_bnhd(q, "q"), _bnhd(k, "k"), _bnhd(v, "v"), None, dropout_p, causal,
                softmax_scale, True, causal_alignment="bottom_right",
                window=_flash.window(window_size), alibi_slopes=alibi_slopes, softcap=softcap,
                return_lse=return_attn_probs, need_weights=return_attn_probs, precision=precision,
                _bnhd_out=True)
    if not return_attn_probs:
        return res.transpose(1, 2)
    return (res[0].transpose(1, 2),) + tuple(res[1:])


class _VarlenFunction(torch.autograd.Function):
    """Saves the inputs, out and the exact softmax statistics for the backward."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, options):
        cu = (_numpy(cu_seqlens_q).copy(), _numpy(cu_seqlens_k).copy())
        out, lse, stats, seed = varlen_attention(_numpy(q), _numpy(k), _numpy(v), *cu,
                                                 **options)
        ctx.cu = cu
        ctx.options = dict(options, dropout_seed=seed)
        out, lse, stats = (torch.from_numpy(a) for a in (out, lse, stats))
        ctx.save_for_backward(q, k, v, out, stats)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _):
        q, k, v, out, stats = ctx.saved_tensors
        grads = varlen_attention_backward(_numpy(grad_out), _numpy(q), _numpy(k), _numpy(v),
                                          *ctx.cu, _numpy(out), _numpy(stats),
                                          needs_grad=ctx.needs_input_grad[:3], **ctx.options)
        dq, dk, dv = (torch.from_numpy(g) if g is not None else None for g in grads)
        return _once_differentiable((dq, dk, dv)) + (None, None, None)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, precision):
    _flash.check_max_seqlens(_numpy(cu_seqlens_q), _numpy(cu_seqlens_k), max_seqlen_q,
                             max_seqlen_k)
    options = dict(softmax_scale=softmax_scale, causal=causal,
                   window=_flash.window(window_size), softcap=softcap,
                   alibi_slopes=_numpy(alibi_slopes), dropout_p=dropout_p,
                   dropout_seed=_seed() if dropout_p else 0, num_threads=_threads(None),
                   precision=precision)
    dtype = q.dtype
    out, lse = _VarlenFunction.apply(_float32(q), _float32(k), _float32(v), cu_seqlens_q,
                                     cu_seqlens_k, options)
    out = out.to(dtype)
    if not return_attn_probs:
        return out
    probs = _flash.varlen_probs(_numpy(_float32(q)), _numpy(_float32(k)), _numpy(_float32(v)),
                                _numpy(cu_seqlens_q), _numpy(cu_seqlens_k), max_seqlen_q,
                                max_seqlen_k, softmax_scale, causal, window_size, softcap,
                                _numpy(alibi_slopes), precision)
    return out, lse, torch.from_numpy(probs)
