#!/usr/bin/env python3
"""Summary of `attn ring bench --json` results and the ring-attention scaling
model of docs/SCALING.md.

    python3 scripts/ring_model.py bench/ring-results.jsonl [N]

The model's inputs come from the 2-rank runs at sequence length N (their
median run; default: the longest sequence measured).

Model. A rank holds n = N/P queries. A tick computes with one piece of
`piece` keys (causal: half of them visible on average) while the next piece
arrives, so a tick costs max(t_c, t_x):
    t_c(n) = tau * n * piece * f     f = 1/2 causal, 1 full;
                                     tau = measured seconds per (query, key) pair
    t_x    = alpha + m * bytes / BW  bytes of a key/value piece; m = 1 forward,
                                     2 backward (the dK/dV accumulator follows)
and the parallel efficiency is E = W * t_c / max(t_c, t_x) (every rank does
the same work per tick in the zigzag layout, and the first tick needs no
transfer); W is the ring's measured work efficiency (single-process CPU
seconds over the ranks' CPU seconds: merges, packing, polling). Communication hides once n >= n* = t_x / (tau * piece * f).
tau and bytes come from the measured P = 2 runs; t_x on this machine is the
measured neighbour exchange; BW for a cluster is the interconnect's.
"""
import json
import math
import sys

ALPHA = 5e-6  # s, per-message latency assumed for a cluster interconnect
LINKS = {"100 Gb/s": 100e9 / 8, "400 Gb/s": 400e9 / 8}


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def pieces(N, P, causal, block_keys=2048):
    """Pieces per block, as ring_common.c's set_geometry."""
    if causal:
        longest = N // (2 * P) + (1 if N % (2 * P) else 0)
        bk = max(1, block_keys // 2)
    else:
        longest = N // P + (1 if N % P else 0)
        bk = block_keys
    return max(1, -(-longest // bk))


def find(rows, **kw):
    """The matching run with the median step time (the lower middle of an even count)."""
    out = sorted((r for r in rows if all(r.get(k) == v for k, v in kw.items())),
                 key=lambda r: r["step_s"])
    return out[(len(out) - 1) // 2] if out else None


def count(rows, **kw):
    return sum(all(r.get(k) == v for k, v in kw.items()) for r in rows)


def mib(b):
    return b / 1048576.0


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        return 2
    rows = load(sys.argv[1])
    if not rows:
        print("no results in", sys.argv[1])
        return 1

    print("== measurements (one line per bench run) ==")
    print(f"{'mode':9} {'P':>2} {'N':>6} {'single':>6} {'step s':>8} {'GFLOP/s':>8} "
          f"{'comm%':>6} {'peak MiB':>9} {'cpu s':>8} {'load':>5}")
    for r in rows:
        print(f"{r['mode']:9} {r['ranks']:>2} {r['seq']:>6} {str(r['single']):>6} "
              f"{r['step_s']:8.3f} {r['gflops']:8.1f} {100 * r['comm_fraction']:6.2f} "
              f"{mib(r['peak_rss_max_bytes']):9.1f} {r.get('cpu_sum_s', 0):8.3f} "
              f"{r.get('load_avg', -1):5.2f}")

    print("\n== 2 ranks x 1 thread vs 1 process x 1 thread (medians of the repeated runs) ==")
    print("ceiling: 2 x the one-process step over the step of two independent processes run at")
    print("once (--single on 2 ranks), the most 2 cores give here to twice the work")
    for N in sorted({r["seq"] for r in rows}):
        for mode in ("forward", "backward"):
            s = find(rows, mode=mode, seq=N, single=True, ranks=1)
            p = find(rows, mode=mode, seq=N, single=False, ranks=2)
            if not s or not p:
                continue
            two = find(rows, mode=mode, seq=N, single=True, ranks=2)
            ceiling = (f", ceiling {2 * s['step_s'] / two['step_s']:.2f}x "
                       f"(two processes {two['step_s']:.3f} s)" if two else "")
            print(f"N={N} {mode:8}: speedup {s['step_s'] / p['step_s']:.2f}x "
                  f"(wall, {s['step_s']:.3f} s -> {p['step_s']:.3f} s), comm wait "
                  f"{100 * p['comm_fraction']:.2f}% of the step, CPU seconds ring/single "
                  f"{p.get('cpu_sum_s', 0) / max(s.get('cpu_sum_s', 1e-9), 1e-9):.3f}, "
                  f"peak memory per rank {mib(p['peak_rss_max_bytes']):.1f} MiB vs "
                  f"{mib(s['peak_rss_max_bytes']):.1f} MiB = "
                  f"{p['peak_rss_max_bytes'] / s['peak_rss_max_bytes']:.3f}x "
                  f"(load average {s.get('load_avg', -1):.2f} / {p.get('load_avg', -1):.2f})"
                  f"{ceiling}, runs {count(rows, mode=mode, seq=N, single=True, ranks=1)}/"
                  f"{count(rows, mode=mode, seq=N, single=False, ranks=2)}")

    # ---------------------------------------------------------- the model
    base = {}
    for mode in ("forward", "backward"):
        cands = [r for r in rows if r["mode"] == mode and r["ranks"] == 2 and not r["single"]
                 and r["piece_compute_s"] > 0]
        if cands:
            seq = int(sys.argv[2]) if len(sys.argv) == 3 else max(r["seq"] for r in cands)
            base[mode] = find(cands, seq=seq)
    if not base:
        print("\n(no 2-rank ring runs: no model)")
        return 0
    print("\n== model inputs (measured, 2 ranks) ==")
    tau, bytes_piece, f_vis, piece = {}, {}, {}, {}
    for mode, r in base.items():
        n = r["seq"] / r["ranks"]
        piece[mode] = r["piece_bytes"] / (4 * r["batch"] * r["kv_heads"] * 2 * r["head_dim"])
        f_vis[mode] = 0.5 if r["causal"] else 1.0
        tau_wall = r["piece_compute_s"] / (n * piece[mode] * f_vis[mode])
        # On a busy machine wall time includes waiting for a core; the CPU
        # seconds of the compute (cpu - comm, per piece) do not.
        cpu_taus = []
        for d in r["ranks_detail"]:
            if d.get("cpu_s") and d["compute_s"] > 0 and r["piece_compute_s"] > 0:
                pieces_done = d["compute_s"] / r["piece_compute_s"]
                cpu_taus.append(max(d["cpu_s"] - d["comm_s"], 0) / pieces_done /
                                (n * piece[mode] * f_vis[mode]))
        tau[mode] = min(tau_wall, sum(cpu_taus) / len(cpu_taus)) if cpu_taus else tau_wall
        bytes_piece[mode] = r["piece_bytes"]
        print(f"{mode:8}: N={r['seq']} n=N/P={n:.0f}, piece {piece[mode]:.0f} keys = "
              f"{mib(r['piece_bytes']):.2f} MiB, per-piece compute {r['piece_compute_s']:.4f} s "
              f"-> tau {tau[mode] * 1e9:.3f} ns per (query, key) pair, 1 thread (from wall time "
              f"{tau_wall * 1e9:.3f}); "
              f"exchange of one piece here {r['transfer_s'] * 1e3:.3f} ms "
              f"({r['transfer_gbps']:.2f} Gb/s)")

    def tick(mode, n, bw, alpha=ALPHA):
        # pieces shrink with the blocks once a rank holds fewer keys than a piece
        keys = min(piece[mode], n)
        m = 2 if mode == "backward" else 1
        t_c = tau[mode] * n * keys * f_vis[mode]
        t_x = alpha + m * bytes_piece[mode] * keys / piece[mode] / bw
        return t_c, t_x

    # The ring's own overhead (merges, packing, MPI polling, per-call costs),
    # measured as single-process CPU seconds over the 2 ranks' CPU seconds at
    # the same N; the model multiplies the overlap efficiency by it.
    work = {}
    for mode, r in base.items():
        s1 = find(rows, mode=mode, seq=r["seq"], single=True, ranks=1)
        if s1 and s1.get("cpu_sum_s") and r.get("cpu_sum_s"):
            work[mode] = s1["cpu_sum_s"] / r["cpu_sum_s"]
        else:
            work[mode] = 1.0
        print(f"{mode:8}: ring work efficiency (single CPU s / 2-rank CPU s at N={r['seq']}) "
              f"{work[mode]:.3f}")

    # Per-rank compute speed: the measured 1-thread rate, and ranks of T
    # threads at the same per-thread rate (an extrapolation: tau / T).
    THREADS = (1, 64)
    print("\n== sequence length per rank above which communication hides (n*) ==")
    for name, bw in LINKS.items():
        for mode in base:
            _, t_x = tick(mode, piece[mode], bw)  # a full piece
            per = [t_x * T / (tau[mode] * piece[mode] * f_vis[mode]) for T in THREADS]
            print(f"{name} {mode:8}: n* = " + ", ".join(
                f"{v:.0f} tokens/rank at {T} thread{'s' if T > 1 else ''} per rank"
                for T, v in zip(THREADS, per)))

    print("\n== predicted parallel efficiency, strong scaling (fixed global N) ==")
    Ps = [8, 16, 32, 64, 128, 256, 512, 1024]
    for T in THREADS:
        for N in (1 << 16, 1 << 20):
            for name, bw in LINKS.items():
                for mode in base:
                    effs = []
                    for P in Ps:
                        t_c, t_x = tick(mode, N / P, bw)
                        t_c /= T
                        effs.append(work[mode] * t_c / max(t_c, t_x))
                    print(f"T={T:<2} N={N:>7} {name} {mode:8}: " +
                          "  ".join(f"P={P}:{e:.2f}" for P, e in zip(Ps, effs)))
    print("(T = threads per rank at the measured per-thread rate; weak scaling: E depends only on")
    print(" n = N/P, so at a fixed n it is the same for every P)")

    # ------------------------------------------------- check at P = 1..4
    chk = [r for r in rows if not r["single"] and r["mode"] in base]
    seqs = sorted({r["seq"] for r in chk if r["ranks"] in (3, 4)})
    if not seqs:
        return 0
    print("\n== model vs measured on this machine (2 cores; P > 2 oversubscribed) ==")
    print("Ranks beyond the 2 cores share them: predicted compute per rank = T1/P x max(1, P/2);")
    print("t_x = the measured neighbour exchange of the same run.")
    for N in seqs:
        for mode in base:
            one = find(rows, mode=mode, seq=N, single=False, ranks=1)
            if not one:
                continue
            T1 = one["step_s"]
            for P in (2, 3, 4):
                r = find(rows, mode=mode, seq=N, single=False, ranks=P)
                if not r:
                    continue
                k = pieces(N, P, r["causal"])
                compute = T1 / P * max(1.0, P / 2.0)
                t_c = compute / (P * k)
                m = 2 if mode == "backward" else 1
                t_x = m * r["transfer_s"]
                pred = P * k * max(t_c, t_x)
                print(f"N={N} {mode:8} P={P}: predicted {pred:.3f} s, measured {r['step_s']:.3f} s "
                      f"(ratio {r['step_s'] / pred:.2f}), measured comm wait "
                      f"{100 * r['comm_fraction']:.2f}%, CPU s all ranks {r.get('cpu_sum_s', 0):.3f} "
                      f"vs P=1 {one.get('cpu_sum_s', 0):.3f}, load {r.get('load_avg', -1):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
