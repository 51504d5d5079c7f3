"""attn.torch.MultiheadAttention vs nn.MultiheadAttention, forward+backward,
and the fixed cost of a tiny call.

    PYTHONPATH=python /usr/bin/python3 python/bench/mha_speed.py [--lengths 512,1024,2048,4096]

Self-attention, batch 1, E=512, 8 heads, batch_first, need_weights=False
(torch's fast path when it has one), both on the same thread count. Runs
are interleaved (torch, attn, torch, attn, ...) after a warm-up, and the
median is reported, so drifts in machine load hit both sides alike.
"""
import argparse
import ctypes
import statistics
import time

import numpy as np
import torch

import attn
import attn.torch
from attn import _lib, _structs, _tensor


def fwd_bwd_seconds(module, x, grad):
    """(wall, CPU) seconds of one forward+backward. CPU time (all threads of
    the process) is the steadier figure on a loaded machine, above all with
    one thread; wall time is what a user waits."""
    w0, c0 = time.perf_counter(), time.process_time()
    out, _ = module(x, x, x, need_weights=False)
    out.backward(grad)
    return time.perf_counter() - w0, time.process_time() - c0


def compare(L, E, heads, reps):
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(E, heads, batch_first=True)
    ours = attn.torch.MultiheadAttention(E, heads, batch_first=True)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(1, L, E, requires_grad=True)
    grad = torch.randn(1, L, E)
    times = {"torch": [], "attn": [], "torch cpu": [], "attn cpu": []}
    for rep in range(reps + 1):  # the first round is a warm-up
        for name, m in (("torch", ref), ("attn", ours)):
            m.zero_grad()
            x.grad = None
            wall, cpu = fwd_bwd_seconds(m, x, grad)
            if rep:
                times[name].append(wall)
                times[name + " cpu"].append(cpu)
    return {k: statistics.median(v) for k, v in times.items()}


def tiny_call_overhead(threads, calls=2000):
    """Median wall time of tiny (L = 8) calls on `threads` threads, in µs."""
    torch.set_num_threads(threads)
    attn.set_num_threads(threads)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 8, 16)).astype(np.float32)
    tq = torch.from_numpy(q)
    mha_ref = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    mha = attn.torch.MultiheadAttention(16, 2, batch_first=True)
    mha.load_state_dict(mha_ref.state_dict())
    x = torch.randn(1, 8, 16)
    out = np.empty_like(q)
    qv, ov = (ctypes.pointer(_tensor.view(a, "x")) for a in (q, out))
    opts = _structs.attn_sdpa_opts(num_threads=threads)
    cases = {
        "attn_sdpa itself (bare ctypes call)":
            lambda: _lib.lib.attn_sdpa(qv, qv, qv, ov, None, None, ctypes.byref(opts), None),
        "attn.scaled_dot_product_attention (NumPy)":
            lambda: attn.scaled_dot_product_attention(q, q, q),
        "attn.torch.scaled_dot_product_attention (no grad)":
            lambda: attn.torch.scaled_dot_product_attention(tq, tq, tq),
        "torch matmul+softmax+matmul (same size)":
            lambda: torch.softmax(tq @ tq.transpose(-2, -1) * 0.25, -1) @ tq,
        "attn.torch.MultiheadAttention forward (no grad)":
            lambda: mha(x, x, x, need_weights=False),
        "nn.MultiheadAttention forward (no grad)":
            lambda: mha_ref(x, x, x, need_weights=False),
    }
    result = {}
    with torch.no_grad():
        for name, f in cases.items():
            for _ in range(100):
                f()
            samples = []
            for _ in range(calls // 100):
                t0 = time.perf_counter()
                for _ in range(100):
                    f()
                samples.append((time.perf_counter() - t0) / 100)
            result[name] = statistics.median(samples) * 1e6
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="512,1024,2048,4096")
    p.add_argument("--embed-dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    attn.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, attn {attn.__version__} ({attn.isa()}), "
          f"{args.threads} threads each, E={args.embed_dim}, H={args.heads}, batch 1, "
          f"forward+backward, median of {args.reps} interleaved runs")
    print(f"# load average before: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print("| L | nn.MultiheadAttention | attn.torch.MultiheadAttention | speed-up | "
          "speed-up in CPU time |")
    print("|---:|---:|---:|---:|---:|")
    for L in (int(s) for s in args.lengths.split(",")):
        reps = args.reps if L < 4096 else max(3, args.reps // 2)
        t = compare(L, args.embed_dim, args.heads, reps)
        print(f"| {L} | {t['torch'] * 1e3:.1f} ms | {t['attn'] * 1e3:.1f} ms | "
              f"{t['torch'] / t['attn']:.2f}x | {t['torch cpu'] / t['attn cpu']:.2f}x |",
              flush=True)
    one, many = tiny_call_overhead(1), tiny_call_overhead(args.threads)
    print("\n# tiny calls (L = 8, E = 16), median per call")
    print(f"| call | 1 thread | {args.threads} threads |")
    print("|---|---:|---:|")
    for name in one:
        print(f"| {name} | {one[name]:.1f} µs | {many[name]:.1f} µs |")
    print(f"# load average after: {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
