#!/usr/bin/env python3
"""Turns one bench/run.sh results file (JSON lines) into markdown: the
side-by-side table and the issue-3 target checks. Standard library only.

    python3 bench/make_table.py bench/results/<stamp>.jsonl
"""
import json
import statistics
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def key(r):
    return (r.get("mode"), r.get("seq"), r.get("head_dim"), bool(r.get("causal")), r.get("threads"))


def main():
    rows = load(sys.argv[1])
    machine = next((r for r in rows if r.get("what") == "machine"), {})
    # Each measurement is rated against the mean of the sgemm runs right
    # before and after it at the same thread count (bench/run.sh pairs them).
    sgemm = {}
    last_load = None
    for i, r in enumerate(rows):
        w = r.get("what")
        if w == "sgemm":
            sgemm.setdefault(r["threads"], []).append(r["gflops"])
        elif w == "load":
            last_load = r["loadavg"]
        elif w in (None, "torch"):
            r["_load"] = last_load
            near = []
            for step in (-1, 1):
                j = i + step
                while 0 <= j < len(rows) and rows[j].get("what") not in (None, "torch"):
                    if rows[j].get("what") == "sgemm" and rows[j]["threads"] == r["threads"]:
                        near.append(rows[j]["gflops"])
                        break
                    j += step
            r["_sgemm"] = sum(near) / len(near) if near else None
    rate = {t: statistics.median(v) for t, v in sgemm.items()}
    attn = {}
    ref = {}
    torch = {}
    for r in rows:
        if r.get("what") == "torch":
            torch[key(r)] = r
        elif "what" not in r:
            (ref if r["path"] == "reference" else attn)[key(r)] = r

    out = []
    out.append("Machine: %s, %s cores; attn kernels: %s (%s)." % (
        machine.get("cpu", "?"), machine.get("cores", "?"), machine.get("isa", "?"),
        machine.get("attn", "?")))
    out.append("")
    for t, v in sorted(sgemm.items()):
        out.append("OpenBLAS sgemm 2048³, %s thread%s: median %.1f GFLOP/s over %d runs "
                   "(min %.1f, max %.1f)." % (t, "" if t == 1 else "s", rate[t], len(v), min(v), max(v)))
    out.append("")
    out.append("B=1, H=8; times are medians; % = GFLOP/s as a share of the sgemm rate measured "
               "right before and after the row at the same thread count; FLOPs forward "
               "4·B·H·N²·D (causal half), backward 2.5×, MHA adds 8·B·L·E² for the projections; "
               "load = 1-minute load average before the row (the machine is shared).")
    out.append("")
    out.append("| mode | N | D | causal | threads | attn fused ms | GFLOP/s | % sgemm "
               "| attn reference ms | % sgemm | PyTorch 1.13 ms | % sgemm | fused vs PyTorch | load |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def pct(r):
        s = r.get("_sgemm")
        return "%.0f%%" % (100.0 * r["gflops"] / s) if s else "-"

    order = {"forward": 0, "backward": 1, "mha": 2}
    for k in sorted(attn, key=lambda k: (order.get(k[0], 3), -k[4], k[1], k[2], k[3])):
        a = attn[k]
        if a["seq"] >= 32768:
            continue
        rf, tr = ref.get(k), torch.get(k)
        loads = [x["_load"] for x in (a, rf, tr) if x and x.get("_load") is not None]
        out.append("| %s | %d | %d | %s | %d | %.2f | %.1f | %s | %s | %s | %s | %s | %s | %s |" % (
            a["mode"], a["seq"], a["head_dim"], "yes" if a["causal"] else "no", a["threads"],
            a["ms"], a["gflops"], pct(a),
            "%.1f" % rf["ms"] if rf else "-", pct(rf) if rf else "-",
            "%.1f" % tr["ms"] if tr else "-", pct(tr) if tr else "-",
            "%.1f×" % (tr["ms"] / a["ms"]) if tr else "-",
            "%.2f" % max(loads) if loads else "-"))
    out.append("")

    # Issue-3 targets (2 threads unless stated).
    T = max(rate) if rate else 2

    def get(mode, n, d=64, causal=False, threads=T):
        return attn.get((mode, n, d, causal, threads))

    checks = []

    def share(r):
        return r["gflops"] / r["_sgemm"] if (r and r.get("_sgemm")) else None

    f2048, f512 = get("forward", 2048), get("forward", 512)
    f128, fc = get("forward", 2048, 128), get("forward", 2048, causal=True)
    b2048, mha = get("backward", 2048), get("mha", 2048)
    f1 = get("forward", 2048, threads=1)
    mem = next((r for r in attn.values() if r["seq"] >= 32768), None)
    if share(f2048) is not None:
        checks.append(("forward N=2048 >= 70% of sgemm", "%.0f%%" % (100 * share(f2048)), share(f2048) >= 0.70))
    if share(f512) is not None:
        checks.append(("forward N=512 >= 50% of sgemm", "%.0f%%" % (100 * share(f512)), share(f512) >= 0.50))
    if f128 and f2048:
        ratio = f128["gflops"] / f2048["gflops"]
        checks.append(("D=128 efficiency within 10% of D=64", "%.2f× of D=64" % ratio, ratio >= 0.90))
    if fc and f2048:
        ratio = fc["ms"] / f2048["ms"]
        checks.append(("causal N=2048 time <= 0.55× unmasked", "%.3f×" % ratio, ratio <= 0.55))
    if share(b2048) is not None:
        checks.append(("backward N=2048 >= 50% of sgemm (2.5× fwd FLOPs)", "%.0f%%" % (100 * share(b2048)), share(b2048) >= 0.50))
    if share(mha) is not None:
        checks.append(("MHA E=512 L=2048 >= 65% of sgemm", "%.0f%%" % (100 * share(mha)), share(mha) >= 0.65))
    tmha = torch.get(("mha", 2048, 64, False, T))
    if mha and tmha:
        checks.append(("MHA vs PyTorch nn.MultiheadAttention (~2× wanted)", "%.2f×" % (tmha["ms"] / mha["ms"]), tmha["ms"] / mha["ms"] >= 2.0))
    if mem:
        checks.append(("fwd+bwd N=32768 peak RSS < 1 GiB", "%.0f MiB" % (mem["peak_rss_bytes"] / 2**20), mem["peak_rss_bytes"] < 2**30))
    if f1 and f2048:
        ratio = f1["ms"] / f2048["ms"]
        checks.append(("%d threads >= 1.8× one thread (forward N=2048)" % T, "%.2f×" % ratio, ratio >= 1.8))
    b1 = get("backward", 2048, threads=1)
    if b1 and b2048:
        ratio = b1["ms"] / b2048["ms"]
        checks.append(("%d threads >= 1.8× one thread (backward N=2048)" % T, "%.2f×" % ratio, ratio >= 1.8))
    tf = torch.get(("forward", 2048, 64, False, T))
    if tf and f2048:
        checks.append(("forward vs PyTorch explicit ops (≈3.5× wanted)", "%.1f×" % (tf["ms"] / f2048["ms"]), tf["ms"] / f2048["ms"] >= 3.5))
    out.append("| target | measured | met |")
    out.append("|---|---|---|")
    for name, val, ok in checks:
        out.append("| %s | %s | %s |" % (name, val, "yes" if ok else "**no**"))
    print("\n".join(out))


if __name__ == "__main__":
    main()
