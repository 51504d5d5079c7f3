#!/usr/bin/python3
"""PyTorch 1.13 side of bench/run.sh: explicit matmul + softmax + matmul
(F.scaled_dot_product_attention does not exist in 1.13), its autograd
backward, and nn.MultiheadAttention in eval mode with need_weights=False.

Prints one JSON line per configuration with the same keys and FLOP counts
as `attn bench --json`: median ms over --runs timed calls after --warmup.
"""
import argparse
import json
import math
import resource
import statistics
import time

import torch


def timed(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def attention(q, k, v, causal):
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        n, m = s.shape[-2], s.shape[-1]
        hidden = torch.ones(n, m, dtype=torch.bool).triu(1)
        s = s.masked_fill(hidden, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="forward", choices=["forward", "backward", "mha"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, H, N, D = a.batch, a.heads, a.seq, a.head_dim
    attn_flops = 4.0 * B * H * N * N * D * (0.5 if a.causal else 1.0)
    if a.mode == "forward":
        q, k, v = (torch.randn(B, H, N, D) for _ in range(3))
        with torch.no_grad():
            med, best = timed(lambda: attention(q, k, v, a.causal), a.runs, a.warmup)
        flops = attn_flops
    elif a.mode == "backward":
        q, k, v = (torch.randn(B, H, N, D, requires_grad=True) for _ in range(3))
        out = attention(q, k, v, a.causal)
        dout = torch.randn_like(out)
        med, best = timed(
            lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), a.runs, a.warmup)
        flops = 2.5 * attn_flops
    else:
        E = H * D
        mha = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
        x = torch.randn(B, N, E)
        mask = torch.ones(N, N, dtype=torch.bool).triu(1) if a.causal else None
        with torch.no_grad():
            med, best = timed(lambda: mha(x, x, x, need_weights=False, attn_mask=mask),
                              a.runs, a.warmup)
        flops = 8.0 * B * N * E * E + attn_flops
    print(json.dumps({
        "what": "torch", "torch": torch.__version__, "mode": a.mode, "batch": B, "heads": H,
        "seq": N, "head_dim": D, "causal": a.causal, "path": "torch-explicit",
        "isa": "torch", "threads": a.threads, "runs": a.runs, "ms": med * 1e3,
        "ms_min": best * 1e3, "gflops": flops / med / 1e9,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
