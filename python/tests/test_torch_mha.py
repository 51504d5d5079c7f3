"""attn.torch.MultiheadAttention as a drop-in for nn.MultiheadAttention:
same parameters and state_dict, same outputs, gradients through attn."""
import copy

import pytest

from reference import assert_close_as_torch
from test_mha import CONFIGS, E, H, inputs



@pytest.fixture(scope="module")
def at(torch):
    import attn.torch
    return attn.torch


def test_same_parameters_init_and_state_dict(torch, at):
    for cfg in (dict(), dict(kdim=6, vdim=10, add_bias_kv=True), dict(bias=False)):
        torch.manual_seed(0)
        ref = torch.nn.MultiheadAttention(E, H, **cfg)
        torch.manual_seed(0)
        ours = at.MultiheadAttention(E, H, **cfg)
        assert isinstance(ours, torch.nn.MultiheadAttention)
        a, b = ref.state_dict(), ours.state_dict()
        assert list(a) == list(b)
        assert all(torch.equal(a[k], b[k]) for k in a)  # torch's initialisation, torch's RNG
        ours.load_state_dict(a, strict=True)
        ref.load_state_dict(b, strict=True)


@pytest.mark.parametrize("cfg,self_attn,masks,average", CONFIGS)
def test_forward_and_gradients_match_nn_module(torch, at, cfg, self_attn, masks, average):
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(E, H, **cfg)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "bias" in name:
                p.normal_()
    ours = at.MultiheadAttention(E, H, **cfg)
    ours.load_state_dict(ref.state_dict(), strict=True)
    q, k, v, kw = inputs(torch, cfg, self_attn, masks, 1)
    grad = None

    def run(module, dtype):
        nonlocal grad
        module = module.to(dtype)
        module.zero_grad(set_to_none=True)
        leaves = [x.detach().to(dtype).requires_grad_() for x in ((q,) if self_attn else (q, k, v))]
        qq, kk, vv = (leaves * 3)[:3] if self_attn else leaves
        mkw = {n: (m.to(dtype) if m.is_floating_point() else m) for n, m in kw.items()}
        o, w = module(qq, kk, vv, need_weights=True, average_attn_weights=average, **mkw)
        if grad is None:
            grad = torch.randn(o.shape, generator=torch.Generator().manual_seed(2))
        (o * grad.to(dtype)).sum().backward()
        return [o.detach(), w.detach()] + [x.grad for x in leaves] + \
            [p.grad for _, p in module.named_parameters()]

    ours_res = run(ours, torch.float32)
    r64, r32 = run(ref, torch.float64), run(ref, torch.float32)
    names = ["out", "weights", "dquery", "dkey", "dvalue"][:2 + (1 if self_attn else 3)] + \
        [n for n, _ in ref.named_parameters()]
    assert len(ours_res) == len(names)
    for name, a, b, c in zip(names, ours_res, r64, r32):
        assert a is not None, f"{name}: no gradient"
        assert a.dtype == torch.float32
        assert_close_as_torch(a.numpy(), b.numpy(), c.numpy(), floor=1e-5, what=name)


def test_need_weights_false_and_other_dtypes(torch, at):
    m = at.MultiheadAttention(8, 2, batch_first=True).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    out, w = m(x, x, x, need_weights=False)
    assert w is None and out.dtype == torch.float64
    out.sum().backward()
    assert x.grad.dtype == torch.float64
    assert all(p.grad is not None and p.grad.dtype == torch.float64 for p in m.parameters())


def test_two_calls_before_one_backward_and_deepcopy(torch, at):
    torch.manual_seed(1)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    ours = copy.deepcopy(at.MultiheadAttention(8, 2, batch_first=True))
    ours.load_state_dict(ref.state_dict())
    a, b = torch.randn(2, 3, 8), torch.randn(2, 4, 8)

    def loss(m):
        return m(a, a, a)[0].square().sum() + m(b, a, a)[0].sum()

    loss(ref).backward()
    loss(ours).backward()
    for (name, p), (_, r) in zip(ours.named_parameters(), ref.named_parameters()):
        assert torch.allclose(p.grad, r.grad, atol=1e-4), name


def test_dropout(torch, at):
    m = at.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    x = torch.randn(2, 5, 8)
    m.eval()
    ref = torch.nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True).eval()
    ref.load_state_dict(m.state_dict())
    assert torch.allclose(m(x, x, x)[0], ref(x, x, x)[0], atol=1e-6)  # no dropout in eval
    m.train()
    a, b = m(x, x, x)[0], m(x, x, x)[0]
    assert not torch.equal(a, b)  # a fresh mask per call
    torch.manual_seed(5)
    c = m(x, x, x)[0]
    torch.manual_seed(5)
    assert torch.equal(c, m(x, x, x)[0])  # torch.manual_seed repeats it


@pytest.mark.parametrize("appended", [dict(), dict(add_bias_kv=True), dict(add_zero_attn=True)])
@pytest.mark.parametrize("extra", [None, "bool", "float"])
def test_is_causal_equals_torchs_triu_mask(torch, at, appended, extra):
    """is_causal=True is attn_mask = triu(ones(L, S), 1) (combined with any
    attn_mask); keys appended by bias_kv / zero attention stay visible."""
    torch.manual_seed(3)
    ref = torch.nn.MultiheadAttention(E, H, batch_first=True, **appended)
    ours = at.MultiheadAttention(E, H, batch_first=True, **appended)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 6, E)
    triu = torch.ones(6, 6, dtype=torch.bool).triu(1)
    mask = None
    if extra == "bool":
        mask = torch.rand(6, 6) < 0.3
        mask[:, 0] = False
        combined = mask | triu
    elif extra == "float":
        mask = torch.randn(6, 6)
        combined = mask.masked_fill(triu, float("-inf"))
    else:
        combined = triu
    o, w = ours(x, x, x, attn_mask=mask, is_causal=True)
    r, rw = ref(x, x, x, attn_mask=combined)
    assert torch.allclose(o, r, atol=1e-5) and torch.allclose(w, rw, atol=1e-6)
