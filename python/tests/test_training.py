"""Associative recall trained with attn.torch.MultiheadAttention in place of
nn.MultiheadAttention: same data, same initialisation, same accuracy."""
import pytest

KEYS, VALUES, PAIRS, E, HEADS = 8, 8, 4, 32, 2


def batch(torch, n, gen):
    """Positions 0..PAIRS-1 hold a (key, value) pair, the last one a query
    key; the target is the value stored under it."""
    keys = torch.rand(n, KEYS, generator=gen).argsort(dim=1)[:, :PAIRS]
    values = torch.randint(0, VALUES, (n, PAIRS), generator=gen)
    pick = torch.randint(0, PAIRS, (n,), generator=gen)
    rows = torch.arange(n)
    query = keys[rows, pick]
    tokens = torch.full((n, PAIRS + 1, 2), KEYS + VALUES)  # the last id embeds to zero
    tokens[:, :PAIRS, 0], tokens[:, :PAIRS, 1] = keys, KEYS + values
    tokens[:, PAIRS, 0] = query
    return tokens, values[rows, pick]


def make_model(torch, mha_class):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(KEYS + VALUES + 1, E, padding_idx=KEYS + VALUES)
    mha = mha_class(E, HEADS, batch_first=True)
    head = torch.nn.Linear(E, VALUES)
    return torch.nn.ModuleList([emb, mha, head])


def forward(model, tokens):
    emb, mha, head = model
    x = emb(tokens).sum(dim=2)
    y, _ = mha(x[:, -1:], x, x, need_weights=False)
    return head(y[:, 0])


def train(torch, mha_class, steps=150):
    model = make_model(torch, mha_class)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        tokens, target = batch(torch, 64, gen)
        loss = torch.nn.functional.cross_entropy(forward(model, tokens), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    tokens, target = batch(torch, 1024, torch.Generator().manual_seed(99))
    with torch.no_grad():
        return float((forward(model, tokens).argmax(dim=1) == target).float().mean())


def test_recall_reaches_the_same_accuracy(torch):
    import attn.torch
    ref = train(torch, torch.nn.MultiheadAttention)
    ours = train(torch, attn.torch.MultiheadAttention)
    print(f"held-out accuracy: nn.MultiheadAttention {ref:.3f}, attn {ours:.3f}")
    assert ref >= 0.9, "the task itself did not train"
    assert ours >= 0.9 and abs(ours - ref) <= 0.03
