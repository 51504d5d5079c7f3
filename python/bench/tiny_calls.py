"""Per-call cost of tiny SDPA calls from Python, against torch's own
matmul+softmax+matmul on the same tensors (torch 1.13 has no SDPA).

    PYTHONPATH=python /usr/bin/python3 python/bench/tiny_calls.py [--threads 1,2]

Each sample is one call; the cases' samples are interleaved (a, b, c, a, b,
c, ...) so drifts in machine load hit them alike, and the median is
reported (on a shared machine the mean is the scheduler's: a descheduled
process waits milliseconds). "nothing to compute" is L = S = E = 1.
"""
import argparse
import ctypes
import statistics
import time

import numpy as np
import torch

import attn
import attn.torch as at
from attn import _lib, _structs, _tensor


def cases(L, E):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, L, E)).astype(np.float32)
    out = np.empty_like(q)
    tq = torch.from_numpy(q)
    tg = tq.clone().requires_grad_()
    qv, ov = (ctypes.pointer(_tensor.view(a, "x")) for a in (q, out))
    opts = _structs.attn_sdpa_opts(num_threads=1)
    s = E ** -0.5
    return {
        "attn_sdpa itself (bare ctypes call)":
            lambda: _lib.lib.attn_sdpa(qv, qv, qv, ov, None, None, ctypes.byref(opts), None),
        "attn.scaled_dot_product_attention (NumPy)":
            lambda: attn.scaled_dot_product_attention(q, q, q),
        "attn.torch.scaled_dot_product_attention":
            lambda: at.scaled_dot_product_attention(tq, tq, tq),
        "torch matmul+softmax+matmul":
            lambda: torch.softmax(tq @ tq.transpose(-2, -1) * s, -1) @ tq,
        "attn.torch forward+backward":
            lambda: at.scaled_dot_product_attention(tg, tg, tg).sum().backward(),
        "torch math forward+backward":
            lambda: (torch.softmax(tg @ tg.transpose(-2, -1) * s, -1) @ tg).sum().backward(),
    }


def measure(fs, samples=2000):
    for f in fs.values():
        for _ in range(50):
            f()
    times = {name: [] for name in fs}
    for _ in range(samples):
        for name, f in fs.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) * 1e6 for name, v in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2")
    args = p.parse_args()
    print(f"# torch {torch.__version__}, attn {attn.__version__} ({attn.isa()}); "
          f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
    for L, E, what in ((1, 1, "nothing to compute (L = S = E = 1)"), (8, 16, "L = S = 8, E = 16")):
        rows = {}
        threads = [int(t) for t in args.threads.split(",")]
        for n in threads:
            torch.set_num_threads(n)
            attn.set_num_threads(0)  # attn.torch follows torch's count
            rows[n] = measure(cases(L, E))
        print(f"\n## {what}: median µs per call")
        print("| call | " + " | ".join(f"{n} thread{'s' * (n > 1)}" for n in threads) + " |")
        print("|---|" + "---:|" * len(threads))
        for name in rows[threads[0]]:
            print(f"| {name} | " + " | ".join(f"{rows[n][name]:.1f}" for n in threads) + " |")


if __name__ == "__main__":
    main()
