#!/usr/bin/env python3
"""Turns one bench/run.sh results file (JSON lines) into markdown: the
machine, the sgemm roofline, the summary table over N, the same-ISA
roofline's tables (when the file has them), the target checks and every
measurement. Standard library only.

    python3 bench/make_table.py bench/results/<stamp>.jsonl

Each row is rated against the mean of the sgemm measurements right before
and after it at its thread count; a configuration measured in several
rounds reports the median of its rounds (ratio and time alike).

The wall-time ratios (causal ÷ unmasked, 1 thread ÷ T threads) come from
the "pair" lines when the file has them: runs A B B A right next to each
other, one ratio (B + B) ÷ (A + A) per quadruple, reported as the median
over quadruples. Files without them fall back to the ratio of the two
configurations' medians, measured minutes apart.

The machine's sgemm lines have "coretype": null (or, in files from before
the same-ISA roofline, no "coretype"). attn kernels the machine record maps
to an OpenBLAS core type ("same_isa_cores", e.g. avx2 -> Haswell) are also
rated against the sgemm lines of that core type beside them: the same-ISA
roofline, reported in tables and checks of its own.
"""
import json
import statistics
import sys

MEASURED = ("attn", "ggml", "torch")


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def impl(r):
    """The row's implementation: attn rows are `attn bench --json` lines (no "what")."""
    return r.get("what", "attn")


def variant(r):
    """What ran: attn's kernel ISA, ggml's K/V type, or PyTorch."""
    if impl(r) == "attn":
        return r["isa"]
    if impl(r) == "ggml":
        return "ggml " + r["kv_type"]
    return "PyTorch " + r["torch"]


def key(r):
    return (variant(r), r["mode"], r["batch"], r["heads"], r["seq"], r["head_dim"],
            bool(r["causal"]), r["threads"])


def beside(rows, i, threads, coretype):
    """Mean GFLOP/s of the sgemm lines nearest before and after rows[i] (none
    past the previous or next measurement) at this thread count and core type."""
    near = []
    for step in (-1, 1):
        j = i + step
        while 0 <= j < len(rows) and impl(rows[j]) not in MEASURED and "pair" not in rows[j]:
            s = rows[j]
            if impl(s) == "sgemm" and s["threads"] == threads and s.get("coretype") == coretype:
                near.append(s["gflops"])
                break
            j += step
    return sum(near) / len(near) if near else None


def rate_rows(rows, same_cores):
    """Gives every measurement its neighbouring sgemm rate (the machine's own
    kernels), its neighbouring same-ISA sgemm rate if its kernel has a core
    type in same_cores, and the load before it."""
    last_load = None
    for i, r in enumerate(rows):
        w = impl(r)
        if w == "load":
            last_load = r["loadavg"]
        if w not in MEASURED or "pair" in r:
            continue
        r["_load"] = last_load
        r["_sgemm"] = beside(rows, i, r["threads"], None)
        core = same_cores.get(r["isa"]) if w == "attn" else None
        if core:
            r["_same"] = beside(rows, i, r["threads"], core)


def paired_ratios(rows):
    """{(variant, pair name): [B's time ÷ A's time, one per complete A-B-B-A quadruple]}."""
    quads = {}
    for r in rows:
        if "pair" in r:
            var = variant(r) if impl(r) in MEASURED else impl(r)
            q = quads.setdefault((var, r["pair"], r["rep"]), {"a": [], "b": []})
            q[r["slot"]].append(r["ms"])
    out = {}
    for (var, name, _), q in quads.items():
        if len(q["a"]) == 2 and len(q["b"]) == 2:
            out.setdefault((var, name), []).append(sum(q["b"]) / sum(q["a"]))
    return out


class Config:
    """One configuration over its rounds: medians of time, rate and share of sgemm."""

    def __init__(self, runs):
        self.runs = runs
        self.r = runs[0]
        self.ms = statistics.median(x["ms"] for x in runs)
        self.gflops = statistics.median(x["gflops"] for x in runs)
        shares = [x["gflops"] / x["_sgemm"] for x in runs if x.get("_sgemm")]
        self.shares = shares
        self.share = statistics.median(shares) if shares else None
        beside = [x["_sgemm"] for x in runs if x.get("_sgemm")]
        self.sgemm = statistics.median(beside) if beside else None
        loads = [x["_load"] for x in runs if x.get("_load") is not None]
        self.load = max(loads) if loads else None
        # The same against the same-ISA sgemm, for kernels that have one.
        self.same_shares = [x["gflops"] / x["_same"] for x in runs if x.get("_same")]
        self.same_share = statistics.median(self.same_shares) if self.same_shares else None
        same = [x["_same"] for x in runs if x.get("_same")]
        self.same_sgemm = statistics.median(same) if same else None


def fmt_share(c):
    return "%.2f" % c.share if c and c.share is not None else "-"


def share_of(c):
    """A configuration's median share of the machine's sgemm, or None."""
    return c.share if c else None


def same_share_of(c):
    """A configuration's median share of its same-ISA sgemm, or None."""
    return c.same_share if c else None


def fmt(x):
    return "%.2f" % x if x is not None else "-"


def main():
    rows = load(sys.argv[1])
    machine = next((r for r in rows if impl(r) == "machine"), {})
    same_cores = machine.get("same_isa_cores") or {}  # attn ISA -> OpenBLAS core type
    rate_rows(rows, same_cores)
    end = next((r for r in rows if impl(r) == "end"), {})
    T = machine.get("threads", 2)
    isas = machine.get("isas", "").split()
    groups = {}
    for r in rows:
        if impl(r) in MEASURED and "pair" not in r:
            groups.setdefault(key(r), []).append(r)
    cfg = {k: Config(v) for k, v in groups.items()}
    paired = paired_ratios(rows)

    def wall_ratio(var, what, mode):
        """(value, text) of a wall-time ratio: what is "causal" (causal ÷
        unmasked time) or "threads" (T threads' speed ÷ 1 thread's); paired
        runs when there are some, else the configurations' medians."""
        p = paired.get((var, "%s-%s" % (what, mode)))
        if p:
            vals = [x if what == "causal" else 1 / x for x in p]
            f = "%.3f" if what == "causal" else "%.2f×"
            v = statistics.median(vals)
            return v, (f + " (%d × ABBA: %s–%s)") % (v, len(vals), f % min(vals), f % max(vals))
        if what == "causal":
            a, b = get(var, mode, 2048, causal=True), get(var, mode, 2048)
            return (a.ms / b.ms, "%.3f" % (a.ms / b.ms)) if a and b else (None, "-")
        a, b = get(var, mode, 2048, threads=1), get(var, mode, 2048)
        return (a.ms / b.ms, "%.2f×" % (a.ms / b.ms)) if a and b else (None, "-")

    def get(var, mode, n, d=64, causal=False, threads=T, heads=8):
        batch = 8 if n == 128 else 1  # N = 128 rows run with B·H = 64
        return cfg.get((var, mode, batch, heads, n, d, causal, threads))

    out = []
    loads = [r["loadavg"] for r in rows if impl(r) == "load"]
    out.append("Run: %s, bench/run.sh%s, %s round%s, %s; load average %s (1-minute, before each "
               "row; the benchmark's own threads count in it)." % (
                   machine.get("date", "?"), " --quick" if machine.get("quick") else "",
                   machine.get("rounds", "?"), "" if machine.get("rounds") == 1 else "s",
                   "%.0f min" % (end["seconds"] / 60) if end else "unfinished",
                   "%.2f–%.2f" % (min(loads), max(loads)) if loads else "?"))
    out.append("")
    out.append("Machine: %s, %s cores, ISA: %s; %s." % (
        machine.get("cpu", "?"), machine.get("cores", "?"), machine.get("isa_flags", "?"),
        machine.get("attn", "?")))
    env = machine.get("env") or "neither OPENBLAS_CORETYPE nor OPENBLAS_L2_SIZE set"
    out.append("")
    out.append("OpenBLAS kernel (OPENBLAS_VERBOSE=2): **%s**, with OPENBLAS_CORETYPE and "
               "OPENBLAS_L2_SIZE unset for the sgemm and PyTorch commands (environment: %s)." % (
                   machine.get("openblas_core") or "?", env) + (
               " Same-ISA sgemm: OPENBLAS_CORETYPE=%s, OPENBLAS_L2_SIZE unset." % ", ".join(
                   "%s for %s" % (core, isa) for isa, core in same_cores.items())
               if same_cores else ""))
    ggml = next((r for r in rows if impl(r) == "ggml"), None)
    out.append("")
    if ggml:
        out.append("ggml: `ggml_flash_attn_ext` of ggml %s (%s), built from source by "
                   "bench/ggml/build.sh (Release, GGML_NATIVE, OpenMP)."
                   % (ggml["ggml"], ggml.get("source", "source unknown")))
    else:
        out.append("ggml: no ggml rows.")
    out.append("")
    sg, sg_same = {}, {}
    for r in rows:
        if impl(r) == "sgemm" and "pair" not in r:
            if r.get("coretype") is None:
                sg.setdefault(r["threads"], []).append(r["gflops"])
            else:
                sg_same.setdefault((r["coretype"], r["threads"]), []).append(r["gflops"])
    for t, v in sorted(sg.items()):
        out.append("- OpenBLAS sgemm 2048³, %s thread%s: median %.1f GFLOP/s over %d measurements "
                   "(min %.1f, max %.1f)" % (t, "" if t == 1 else "s", statistics.median(v), len(v),
                                             min(v), max(v)))
    core_order = list(same_cores.values())
    for (core, t), v in sorted(sg_same.items(), key=lambda kv: (
            core_order.index(kv[0][0]) if kv[0][0] in core_order else len(core_order), kv[0])):
        isas_of = [isa for isa, c in same_cores.items() if c == core]
        out.append("- OpenBLAS sgemm 2048³ on %s kernels (%s), %s thread%s: median %.1f GFLOP/s over "
                   "%d measurements (min %.1f, max %.1f)%s" % (
                       core, "same-ISA roofline of " + ", ".join(isas_of) if isas_of else
                       "OPENBLAS_CORETYPE=" + core, t, "" if t == 1 else "s", statistics.median(v),
                       len(v), min(v), max(v),
                       ", %.2f of the machine's" % (statistics.median(v) / statistics.median(sg[t]))
                       if sg.get(t) else ""))
    out.append("")
    out.append("Shares of sgemm are a row's GFLOP/s over the mean of the sgemm runs right before "
               "and after it at the same thread count. FLOPs: forward 4·B·H·N²·D (causal half), "
               "backward 2.5× forward, MHA 8·B·L·E² for the four projections plus the attention. "
               "B=1, H=8, D=64, %d threads, no mask unless stated; N=128 rows run B=8 (B·H=64)."
               % T)
    out.append("")

    # Summary: share of sgemm over N, one line per implementation and mode.
    ns = sorted({k[4] for k in cfg})
    variants = isas + ["generic", "ggml f32", "ggml f16"] + \
        sorted({k[0] for k in cfg if k[0].startswith("PyTorch")})
    out.append("| share of sgemm | " + " | ".join("N=%d" % n for n in ns) + " |")
    out.append("|---|" + "---|" * len(ns))
    for mode in ("forward", "backward"):
        for var in variants:
            cells = [get(var, mode, n) for n in ns]
            if any(cells):
                out.append("| %s %s | %s |" % (var, mode, " | ".join(fmt_share(c) for c in cells)))
    best = isas[0] if isas else None
    for var in [v for v in variants if v.startswith(("ggml", "PyTorch"))]:
        pairs = [(get(var, "forward", n), get(best, "forward", n)) for n in ns]
        if any(o and a for o, a in pairs):
            out.append("| %s forward time ÷ attn %s | %s |" % (var, best, " | ".join(
                "%.1f×" % (o.ms / a.ms) if o and a else "-" for o, a in pairs)))
    out.append("")

    # Other shapes and ratios, one column per implementation.
    cols = [v for v in variants if any(k[0] == v for k in cfg)]
    lines = [
        ("forward N=2048 D=128, share of sgemm", lambda v: fmt_share(get(v, "forward", 2048, 128))),
        ("MHA E=512 L=2048 (projections included), share of sgemm",
         lambda v: fmt_share(get(v, "mha", 2048))),
        ("causal ÷ unmasked wall time, forward N=2048",
         lambda v: wall_ratio(v, "causal", "forward")[1]),
        ("causal ÷ unmasked wall time, backward N=2048",
         lambda v: wall_ratio(v, "causal", "backward")[1]),
        ("%d threads ÷ 1 thread speed, forward N=2048" % T,
         lambda v: wall_ratio(v, "threads", "forward")[1]),
        ("%d threads ÷ 1 thread speed, backward N=2048" % T,
         lambda v: wall_ratio(v, "threads", "backward")[1]),
    ]
    out.append("| | " + " | ".join(cols) + " |")
    out.append("|---|" + "---|" * len(cols))
    for name, f in lines:
        cells = [f(v) for v in cols]
        if any(c != "-" for c in cells):
            out.append("| %s | %s |" % (name, " | ".join(cells)))
    out.append("")
    sgemm_speedup = wall_ratio("sgemm", "threads", "sgemm")
    if sgemm_speedup[0] is not None:
        out.append("Ratios from runs side by side, A B B A (PAIRS times a round). For the thread "
                   "rows' scale: OpenBLAS sgemm 2048³ measured the same way, %d threads ÷ 1 "
                   "thread speed: %s." % (T, sgemm_speedup[1]))
        out.append("")

    # The same-ISA roofline: attn's narrower kernels against OpenBLAS on the
    # same vector ISA.
    same_vars = [v for v in variants if v in same_cores and any(
        k[0] == v and cfg[k].same_share is not None for k in cfg)]
    if same_vars:
        cores = ", ".join("%s for %s" % (same_cores[v], v) for v in same_vars)
        out.append("Same-ISA roofline. A kernel's vector width caps its rate: 512-bit FMA (avx512), "
                   "256-bit FMA (avx2) and 128-bit multiply and add without FMA (generic, built for "
                   "baseline x86-64) reach at most 1, ½ and ¼ of the AVX-512 rate. So besides the "
                   "machine's sgemm, %s %s also rated against OpenBLAS sgemm forced to kernels of "
                   "the same vector ISA (OPENBLAS_CORETYPE: %s), measured right before and after "
                   "each of %s rows." % (" and ".join(same_vars), "is" if len(same_vars) == 1 else
                                         "are", cores, "its" if len(same_vars) == 1 else "their"))
        out.append("")
        out.append("| share of the same-ISA sgemm (OpenBLAS kernels: %s) | %s |" % (
            cores, " | ".join("N=%d" % n for n in ns)))
        out.append("|---|" + "---|" * len(ns))
        for mode in ("forward", "backward"):
            for var in same_vars:
                cells = [same_share_of(get(var, mode, n)) for n in ns]
                if any(c is not None for c in cells):
                    out.append("| %s %s | %s |" % (var, mode, " | ".join(fmt(c) for c in cells)))
        out.append("")
        same_lines = [
            ("forward N=2048 D=128", lambda v: get(v, "forward", 2048, 128)),
            ("MHA E=512 L=2048 (projections included)", lambda v: get(v, "mha", 2048)),
            ("forward N=2048, causal", lambda v: get(v, "forward", 2048, causal=True)),
            ("backward N=2048, causal", lambda v: get(v, "backward", 2048, causal=True)),
            ("forward N=2048, 1 thread", lambda v: get(v, "forward", 2048, threads=1)),
            ("backward N=2048, 1 thread", lambda v: get(v, "backward", 2048, threads=1)),
        ]
        rendered = [(name, [fmt(same_share_of(f(v))) for v in same_vars]) for name, f in same_lines]
        rendered = [(name, cells) for name, cells in rendered if any(c != "-" for c in cells)]
        if rendered:
            out.append("| share of the same-ISA sgemm | %s |" % " | ".join(
                "%s (÷ %s)" % (v, same_cores[v]) for v in same_vars))
            out.append("|---|" + "---|" * len(same_vars))
            for name, cells in rendered:
                out.append("| %s | %s |" % (name, " | ".join(cells)))
            out.append("")

    # The performance targets, on each ISA the machine has: against the machine's
    # sgemm, then (the share targets only) against the same-ISA sgemm.
    checks = []

    def isa_checks(var, label, share, ratios):
        """The target checks of kernel var, labelled label, with share(c) the
        share of sgemm rated; ratios: also the wall-time checks (causal,
        threads), which need no roofline."""
        def at_least(name, c, limit):
            s = share(c)
            if s is not None:
                checks.append((name, label, "%.2f" % s, s >= limit))

        fwd = [(n, share(get(var, "forward", n))) for n in ns if n >= 1024]
        fwd = [(n, s) for n, s in fwd if s is not None]
        if fwd:
            checks.append(("forward ≥ 0.85 for N = 1024…%d, no drop at large N" % fwd[-1][0], label,
                           ", ".join("%d: %.2f" % (n, s) for n, s in fwd),
                           min(s for _, s in fwd) >= 0.85))
        at_least("forward ≥ 0.75 at N = 512", get(var, "forward", 512), 0.75)
        at_least("forward ≥ 0.60 at N = 128, B·H = 64", get(var, "forward", 128), 0.60)
        bwd = [(n, share(get(var, "backward", n))) for n in ns if n >= 2048]
        bwd = [(n, s) for n, s in bwd if s is not None]
        if bwd:
            checks.append(("backward ≥ 0.80 for N ≥ 2048", label,
                           ", ".join("%d: %.2f" % (n, s) for n, s in bwd),
                           min(s for _, s in bwd) >= 0.80))
        at_least("backward ≥ 0.70 at N = 1024", get(var, "backward", 1024), 0.70)
        if ratios:
            for mode in ("forward", "backward"):
                v, text = wall_ratio(var, "causal", mode)
                if v is not None:
                    checks.append(("causal wall time ≤ 0.52 × unmasked (%s N=2048)" % mode, label,
                                   text, v <= 0.52))
        at_least("MHA E=512 L=2048, projections included, ≥ 0.85", get(var, "mha", 2048), 0.85)
        if ratios:
            for mode in ("forward", "backward"):
                v, text = wall_ratio(var, "threads", mode)
                if v is not None:
                    checks.append(("%d threads ≥ 1.9× one (%s N=2048)" % (T, mode), label,
                                   text, v >= 1.9))

    def generic_checks(label, share):
        for mode in ("forward", "backward", "mha"):
            s = share(get("generic", mode, 2048))
            if s is not None:
                checks.append(("generic C kernel ≥ 0.25 of sgemm (%s N=2048)" % mode, label,
                               "%.2f" % s, s >= 0.25))

    def same_label(var):
        return "%s (÷ %s sgemm)" % (var, same_cores[var])

    for var in isas:
        isa_checks(var, var, share_of, True)
        if var in same_cores:
            isa_checks(var, same_label(var), same_share_of, False)
    generic_checks("generic", share_of)
    if "generic" in same_cores:
        generic_checks(same_label("generic"), same_share_of)
    out.append("| target | kernels | measured | met |")
    out.append("|---|---|---|---|")
    for name, var, val, ok in checks:
        out.append("| %s | %s | %s | %s |" % (name, var, val, "met" if ok else "**not met**"))
    out.append("")

    # Every configuration.
    out.append("<details><summary>All measurements (medians of the rounds)</summary>")
    out.append("")
    # The same-ISA columns only for results that have them.
    has_same = any(c.same_share is not None for c in cfg.values())
    out.append("| what | mode | B | H | N | D | causal | threads | rounds | ms | GFLOP/s "
               "| sgemm beside | share (min–max) |%s load |" % (
                   " same-ISA sgemm beside | same-ISA share (min–max) |" if has_same else ""))
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|---|" * has_same)
    for k in sorted(cfg, key=lambda k: (k[1], k[0], k[7], k[5], k[6], k[4])):
        c = cfg[k]
        spread = " (%.2f–%.2f)" % (min(c.shares), max(c.shares)) if len(c.shares) > 1 else ""
        same = ""
        if has_same:
            same_spread = " (%.2f–%.2f)" % (min(c.same_shares), max(c.same_shares)) \
                if len(c.same_shares) > 1 else ""
            same = " %s | %s%s |" % ("%.1f %s" % (c.same_sgemm, same_cores.get(k[0], "?"))
                                     if c.same_sgemm else "-", fmt(c.same_share), same_spread)
        out.append("| %s | %s | %d | %d | %d | %d | %s | %d | %d | %.2f | %.1f | %s | %s%s |%s %s |" % (
            k[0], k[1], k[2], k[3], k[4], k[5], "yes" if k[6] else "no", k[7], len(c.runs), c.ms,
            c.gflops, "%.1f" % c.sgemm if c.sgemm else "-", fmt_share(c), spread, same,
            "%.2f" % c.load if c.load is not None else "-"))
    out.append("")
    out.append("</details>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
