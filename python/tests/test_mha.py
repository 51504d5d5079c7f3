"""attn.MultiheadAttention (NumPy) against torch.nn.MultiheadAttention:
outputs, weights, input and parameter gradients, float64 and float32 torch."""
import numpy as np
import pytest

from reference import assert_close_as_torch

import attn

CONFIGS = [  # constructor kwargs, self-attention, mask kinds, average weights
    (dict(batch_first=True), True, ("kpm_bool",), True),
    (dict(batch_first=False), True, ("mask_bool",), False),
    (dict(batch_first=True, kdim=6, vdim=10), False, ("kpm_float",), True),
    (dict(batch_first=False, bias=False, add_bias_kv=True), False, ("mask_float3d",), False),
    (dict(batch_first=True, add_zero_attn=True), True, ("kpm_bool", "mask_bool"), True),
    (dict(batch_first=True, add_bias_kv=True, add_zero_attn=True), False, (), False),
    (dict(batch_first=False), "unbatched", ("mask_bool",), True),
    (dict(batch_first=True), True, ("causal",), True),
]
E, H, N, L, S = 16, 4, 3, 5, 7


def inputs(torch, cfg, self_attn, masks, seed):
    g = torch.Generator().manual_seed(seed)
    bf = cfg.get("batch_first", False)
    unbatched = self_attn == "unbatched"
    lk = L if self_attn else S
    shape = lambda n, f: ((n, f) if unbatched else (N, n, f) if bf else (n, N, f))  # noqa
    q = torch.randn(shape(L, E), generator=g)
    if self_attn:
        k = v = q
    else:
        k = torch.randn(shape(lk, cfg.get("kdim", E)), generator=g)
        v = torch.randn(shape(lk, cfg.get("vdim", E)), generator=g)
    kw = {}
    for m in masks:
        if m == "kpm_bool":
            pad = torch.rand((lk,) if unbatched else (N, lk), generator=g) < 0.3
            pad[..., 0] = False
            kw["key_padding_mask"] = pad
        elif m == "kpm_float":
            kw["key_padding_mask"] = torch.randn((N, lk), generator=g)
        elif m == "mask_bool":
            mask = torch.rand(L, lk, generator=g) < 0.3
            mask[:, 0] = False
            kw["attn_mask"] = mask
        elif m == "mask_float3d":
            kw["attn_mask"] = torch.randn(N * H, L, lk, generator=g)
        elif m == "causal":
            kw["attn_mask"] = torch.triu(torch.ones(L, lk, dtype=torch.bool), 1)
    return q, k, v, kw


@pytest.mark.parametrize("cfg,self_attn,masks,average", CONFIGS)
def test_matches_torch_module(torch, cfg, self_attn, masks, average):
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(E, H, **cfg)
    with torch.no_grad():  # nonzero biases, so their gradients mean something
        for name, p in ref.named_parameters():
            if "bias" in name:
                p.normal_()
    ours = attn.MultiheadAttention(E, H, **cfg)
    ours.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    q, k, v, kw = inputs(torch, cfg, self_attn, masks, 1)
    np_kw = {name: m.numpy() for name, m in kw.items()}
    if "causal" in masks:  # the same mask, also through is_causal
        np_kw = dict(is_causal=True)
    qn = q.numpy()
    kn, vn = (qn, qn) if self_attn else (k.numpy(), v.numpy())
    out, w = ours(qn, kn, vn, need_weights=True, average_attn_weights=average, **np_kw)
    grad = np.random.default_rng(2).standard_normal(out.shape).astype(np.float32)
    ours.zero_grad()
    dq, dk, dv = ours.backward(grad, qn, kn, vn, **{n: m for n, m in np_kw.items()})

    def run(dtype):
        module = ref.to(dtype)
        for p in module.parameters():
            p.grad = None
        leaves = [x.detach().to(dtype).requires_grad_() for x in ((q,) if self_attn else (q, k, v))]
        qq, kk, vv = (leaves * 3)[:3] if self_attn else leaves
        mkw = {n: (m.to(dtype) if m.is_floating_point() else m) for n, m in kw.items()}
        o, weights = module(qq, kk, vv, need_weights=True, average_attn_weights=average, **mkw)
        (o * torch.tensor(grad, dtype=dtype)).sum().backward()
        params = {n: p.grad.numpy().copy() for n, p in module.named_parameters()}
        return o.detach().numpy(), weights.detach().numpy(), [x.grad.numpy() for x in leaves], \
            params

    o64, w64, g64, p64 = run(torch.float64)
    o32, w32, g32, p32 = run(torch.float32)
    assert_close_as_torch(out, o64, o32, what="out")
    assert_close_as_torch(w, w64, w32, what="weights")
    ours_in = [dq] if self_attn else [dq, dk, dv]
    if self_attn:
        assert dk is None and dv is None
    for name, a, b, c in zip(("dquery", "dkey", "dvalue"), ours_in, g64, g32):
        assert_close_as_torch(a, b, c, floor=1e-5, what=name)
    grads = dict(ours.named_grads())
    assert set(grads) == set(p64)
    for name in p64:
        assert_close_as_torch(grads[name], p64[name], p32[name], floor=1e-5, what=name)


def test_state_dict_round_trip_and_accumulating_gradients():
    m = attn.MultiheadAttention(8, 2, batch_first=True, seed=3)
    sd = m.state_dict()
    assert list(sd) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    other = attn.MultiheadAttention(8, 2, batch_first=True, seed=4)
    assert not np.array_equal(other.state_dict()["in_proj_weight"], sd["in_proj_weight"])
    other.load_state_dict(sd)
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    np.testing.assert_array_equal(m(x, x, x)[0], other(x, x, x)[0])
    g = np.ones((2, 3, 8), np.float32)
    m.zero_grad()
    m.backward(g, x, x, x)
    once = dict(m.named_grads())["in_proj_weight"].copy()
    m.backward(g, x, x, x)
    np.testing.assert_allclose(dict(m.named_grads())["in_proj_weight"], 2 * once, rtol=1e-6)


def test_dropout_in_training_mode_is_keyed_by_the_seed():
    """attn_mha's dropout: the seed picks the mask, eval() turns it off, and the
    backward given the forward's seed matches finite differences of the forward."""
    m = attn.MultiheadAttention(8, 2, dropout=0.4, batch_first=True, seed=1)
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    a = m(x, x, x, dropout_seed=3)[0]
    np.testing.assert_array_equal(a, m(x, x, x, dropout_seed=3)[0])
    assert not np.array_equal(a, m(x, x, x, dropout_seed=4)[0])
    m.eval()
    e = m(x, x, x)[0]
    np.testing.assert_array_equal(e, m(x, x, x)[0])
    assert not np.array_equal(a, e)
    m.train()
    g = np.random.default_rng(1).standard_normal(a.shape).astype(np.float32)
    m.zero_grad()
    dx = m.backward(g, x, x, x, dropout_seed=3)[0]
    d = np.random.default_rng(2).standard_normal(x.shape).astype(np.float32)
    f = lambda y: float((m(y, y, y, dropout_seed=3, need_weights=False)[0]  # noqa: E731
                         .astype(np.float64) * g).sum())
    h = 1e-2
    numeric = (f(x + h * d) - f(x - h * d)) / (2 * h)
    assert abs(float((dx.astype(np.float64) * d).sum()) - numeric) < 2e-2 * max(1.0, abs(numeric))
    with pytest.raises(ValueError, match="dropout_seed"):
        m.backward(g, x, x, x)
