"""The plain math attn is tested against, written with torch ops (torch 1.13
has no scaled_dot_product_attention). Run in float64 it is the reference; in
float32 it is "what torch itself gets", the yardstick for attn's error."""
import math

import numpy as np


def sdpa(torch, q, k, v, attn_mask=None, is_causal=False, alignment="top_left", scale=None,
         enable_gqa=False, window=None, alibi_slopes=None, softcap=0.0, sinks=None):
    """(out, lse, weights) of torch SDPA semantics, in q's dtype; differentiable.
    A row that sees no key gives out 0, lse -inf, weights 0 (attn's rule)."""
    L, S = q.shape[-2], k.shape[-2]
    if q.dim() >= 3 and k.shape[-3] != q.shape[-3] and (enable_gqa or k.shape[-3] > 1):
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    x = (q @ k.transpose(-2, -1)) * scale
    if softcap:
        x = softcap * torch.tanh(x / softcap)
    i = torch.arange(L).unsqueeze(-1)
    j = torch.arange(S)
    if alibi_slopes is not None:
        slopes = torch.as_tensor(alibi_slopes, dtype=x.dtype)
        x = x - slopes[..., None, None] * (i + S - L - j).abs().to(x.dtype)
    visible = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        visible = visible & (j <= i + (S - L if alignment == "bottom_right" else 0))
    if window is not None:
        left, right = window
        d = j - (i + S - L)
        if left is not None and left >= 0:
            visible = visible & (d >= -left)
        if right is not None and right >= 0:
            visible = visible & (d <= right)
    if attn_mask is not None:
        m = torch.as_tensor(attn_mask)
        if m.dtype == torch.bool:
            visible = visible & m
        else:
            x = x + m.to(x.dtype)
    x = x.masked_fill(~visible, -math.inf)
    row_max = x.amax(dim=-1, keepdim=True)
    if sinks is not None:
        sink = torch.as_tensor(sinks).to(x.dtype)[..., None, None].expand(row_max.shape)
        row_max = torch.maximum(row_max, sink)
    empty = torch.isinf(row_max) & (row_max < 0)
    safe_max = torch.where(empty, torch.zeros_like(row_max), row_max)
    p = torch.exp(x - safe_max)
    denom = p.sum(dim=-1, keepdim=True)
    if sinks is not None:
        denom = denom + torch.exp(sink - safe_max)
    safe_denom = torch.where(empty, torch.ones_like(denom), denom)
    weights = torch.where(empty, torch.zeros_like(p), p / safe_denom)
    out = weights @ v
    lse = torch.where(empty, torch.full_like(row_max, -math.inf),
                      safe_max + torch.log(safe_denom)).squeeze(-1)
    return out, lse, weights


def max_error(a, b):
    """Largest |a - b| over finite entries, after checking the infinities agree."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.array_equal(np.isinf(a), np.isinf(b)), "infinities differ"
    assert not np.isnan(a).any() and not np.isnan(b).any(), "NaN"
    fin = np.isfinite(a)
    return float(np.abs(a[fin] - b[fin]).max()) if fin.any() else 0.0


def assert_close_as_torch(ours, ref64, torch32, floor=2e-6, factor=4.0, what=""):
    """attn's float32 error against float64 is within `factor` of torch's own
    float32 error (or below an absolute floor scaled to the data)."""
    ours_err = max_error(ours, ref64)
    torch_err = max_error(torch32, ref64)
    scale = max(1.0, float(np.abs(np.asarray(ref64)[np.isfinite(ref64)]).max(initial=0.0)))
    bound = max(factor * torch_err, floor * scale)
    assert ours_err <= bound, f"{what}: attn error {ours_err:.3g} > {bound:.3g} " \
                              f"(torch float32 error {torch_err:.3g})"
