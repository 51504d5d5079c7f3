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

The machine's sgemm lines have the "coretype" the machine record names in
"openblas_coretype" (the kernels run.sh forced OpenBLAS to), or null where
OpenBLAS's own pick was kept (and in files from before the forcing; files
from before the same-ISA roofline have no "coretype" at all). attn kernels
the machine record maps to an OpenBLAS core type ("same_isa_cores", e.g.
avx2 -> Haswell) are also rated against the sgemm lines of that core type
beside them: the same-ISA roofline, reported in tables and checks of its
own.

oneDNN's matmul lines ("what": "dnnl", "dtype": "f32" or "bf16") give the
matrix engines' roofline: attn rows with bf16 products ("precision":
"bf16") are rated against the bf16 ones beside them (else the run's median
at their thread count), and the float32 ones cross-check sgemm: a warning
when OpenBLAS runs below 0.8 of oneDNN's float32 rate, which means its
kernels are not the machine's best and every share of sgemm is inflated.
"""
import json
import statistics
import sys

MEASURED = ("attn", "ggml", "torch")
MISMATCH = 0.8  # OpenBLAS sgemm below this share of oneDNN's float32 matmul: a warning


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def impl(r):
    """The row's implementation: attn rows are `attn bench --json` lines (no "what")."""
    return r.get("what", "attn")


def is_bf16(r):
    """An attn row with bf16 products (the engine's rows; --bf16-dot was the option's former name)."""
    return impl(r) == "attn" and (r.get("precision") in ("bf16", "bfloat16") or
                                  "bf16-dot" in r.get("variant", "").split())


def variant(r):
    """What ran: attn's kernel ISA (its engine for bf16 products; its dtype
    if not float32), ggml's K/V type, or PyTorch."""
    if is_bf16(r):
        return "bf16 " + r.get("engine", r["isa"])
    if impl(r) == "attn":
        return r["isa"] + ("" if r.get("dtype", "float32") in ("f32", "float32") else " " + r["dtype"])
    if impl(r) == "ggml":
        return "ggml " + r["kv_type"]
    return "PyTorch " + r["torch"]


def key(r):
    return (variant(r), r["mode"], r["batch"], r["heads"], r["seq"], r["head_dim"],
            bool(r["causal"]), r["threads"])


def sgemm_on(coretype):
    """Matches the sgemm lines run under this OPENBLAS_CORETYPE (None: unset)."""
    return lambda s: impl(s) == "sgemm" and "pair" not in s and s.get("coretype") == coretype


def dnnl_in(dtype):
    """Matches oneDNN's matmul lines of this data type."""
    return lambda s: impl(s) == "dnnl" and s["dtype"] == dtype


def beside(rows, i, threads, match):
    """Mean GFLOP/s of the lines that match, nearest before and after rows[i]
    (none past the previous or next measurement), at this thread count."""
    near = []
    for step in (-1, 1):
        j = i + step
        while 0 <= j < len(rows) and impl(rows[j]) not in MEASURED and "pair" not in rows[j]:
            s = rows[j]
            if match(s) and s["threads"] == threads:
                near.append(s["gflops"])
                break
            j += step
    return sum(near) / len(near) if near else None


def medians(rows, match):
    """{threads: [GFLOP/s, ...]} of the lines that match."""
    out = {}
    for r in rows:
        if match(r):
            out.setdefault(r["threads"], []).append(r["gflops"])
    return out


def rate_rows(rows, main_core, same_cores):
    """Gives every measurement its neighbouring sgemm rate (on main_core, the
    roofline's OPENBLAS_CORETYPE), its neighbouring same-ISA sgemm rate if
    its kernel has a core type in same_cores, bf16 rows their neighbouring
    oneDNN bf16 rate (else the run's median at their thread count), and the
    load before it."""
    dnnl_bf16 = medians(rows, dnnl_in("bf16"))
    last_load = None
    for i, r in enumerate(rows):
        w = impl(r)
        if w == "load":
            last_load = r["loadavg"]
        if w not in MEASURED or "pair" in r:
            continue
        r["_load"] = last_load
        r["_sgemm"] = beside(rows, i, r["threads"], sgemm_on(main_core))
        core = same_cores.get(r["isa"]) if w == "attn" and not is_bf16(r) else None
        if core:
            r["_same"] = beside(rows, i, r["threads"], sgemm_on(core))
        if is_bf16(r):
            near = beside(rows, i, r["threads"], dnnl_in("bf16"))
            if near is None and dnnl_bf16.get(r["threads"]):
                near = statistics.median(dnnl_bf16[r["threads"]])
            r["_dnnl"] = near


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
        # bf16 products: the share of oneDNN's bf16 matmul.
        dnnl = [x["gflops"] / x["_dnnl"] for x in runs if x.get("_dnnl")]
        self.dnnl_share = statistics.median(dnnl) if dnnl else None


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


def plural(n, word):
    return "%s %s%s" % (n, word, "" if n == 1 else "s")


def rates_text(v):
    """A roofline's measurements: median, count, range."""
    return "median %.1f GFLOP/s over %s (min %.1f, max %.1f)" % (
        statistics.median(v), plural(len(v), "measurement"), min(v), max(v))


def openblas_line(machine, same_cores):
    """Which OpenBLAS kernels the sgemm roofline ran, and why."""
    env = machine.get("env") or "neither OPENBLAS_CORETYPE nor OPENBLAS_L2_SIZE set"
    core, forced = machine.get("openblas_core") or "?", machine.get("openblas_coretype")
    own, best = machine.get("openblas_own_core"), machine.get("openblas_best_cores")
    if forced:
        how = ("forced with OPENBLAS_CORETYPE=%s for the sgemm and PyTorch commands: the best "
               "kernels this CPU's ISA allows, where OpenBLAS's own pick is %s" % (forced, own or "?"))
    elif own is None:  # files from before the forcing
        how = "OpenBLAS's own pick, with OPENBLAS_CORETYPE unset for the sgemm and PyTorch commands"
    elif best and core not in best.split():
        how = ("OpenBLAS's own pick, with OPENBLAS_CORETYPE unset for the sgemm and PyTorch commands; "
               "**not** the best this CPU's ISA allows (%s), which this OpenBLAS does not run" % best)
    else:
        how = ("OpenBLAS's own pick%s, with OPENBLAS_CORETYPE unset for the sgemm and PyTorch commands"
               % (", one of the best kernel sets for this CPU's ISA (%s)" % best.replace(" ", ", ")
                  if best else ""))
    return "OpenBLAS kernels of the sgemm roofline: **%s**, %s; OPENBLAS_L2_SIZE unset (environment: %s)." % (
        core, how, env) + (" Same-ISA sgemm: OPENBLAS_CORETYPE=%s, OPENBLAS_L2_SIZE unset." % ", ".join(
            "%s for %s" % (c, isa) for isa, c in same_cores.items()) if same_cores else "")


def main():
    rows = load(sys.argv[1])
    machine = next((r for r in rows if impl(r) == "machine"), {})
    same_cores = machine.get("same_isa_cores") or {}  # attn ISA -> OpenBLAS core type
    main_core = machine.get("openblas_coretype")  # the roofline's OPENBLAS_CORETYPE, None: unset
    rate_rows(rows, main_core, same_cores)
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
    out.append("")
    out.append(openblas_line(machine, same_cores))
    ggml = next((r for r in rows if impl(r) == "ggml"), None)
    out.append("")
    if ggml:
        out.append("ggml: `ggml_flash_attn_ext` of ggml %s (%s), built from source by "
                   "bench/ggml/build.sh (Release, GGML_NATIVE, OpenMP)."
                   % (ggml["ggml"], ggml.get("source", "source unknown")))
    else:
        out.append("ggml: no ggml rows.")
    out.append("")
    sg, sg_own, sg_same = {}, {}, {}
    for r in rows:
        if impl(r) == "sgemm" and "pair" not in r:
            if r.get("coretype") == main_core:
                sg.setdefault(r["threads"], []).append(r["gflops"])
            elif r.get("coretype") is None:
                sg_own.setdefault(r["threads"], []).append(r["gflops"])
            else:
                sg_same.setdefault((r["coretype"], r["threads"]), []).append(r["gflops"])
    roof_core = machine.get("openblas_core")
    for t, v in sorted(sg.items()):
        out.append("- OpenBLAS sgemm 2048³%s, %s: %s" % (
            " (%s)" % roof_core if roof_core else "", plural(t, "thread"), rates_text(v)))
    for t, v in sorted(sg_own.items()):
        out.append("- OpenBLAS sgemm 2048³ on its own pick (%s, OPENBLAS_CORETYPE unset; not the "
                   "roofline), %s: %s%s" % (
                       machine.get("openblas_own_core", "?"), plural(t, "thread"), rates_text(v),
                       ", %.2f of the roofline's" % (statistics.median(v) / statistics.median(sg[t]))
                       if sg.get(t) else ""))
    core_order = list(same_cores.values())
    for (core, t), v in sorted(sg_same.items(), key=lambda kv: (
            core_order.index(kv[0][0]) if kv[0][0] in core_order else len(core_order), kv[0])):
        isas_of = [isa for isa, c in same_cores.items() if c == core]
        out.append("- OpenBLAS sgemm 2048³ on %s kernels (%s), %s: %s%s" % (
            core, "same-ISA roofline of " + ", ".join(isas_of) if isas_of else
            "OPENBLAS_CORETYPE=" + core, plural(t, "thread"), rates_text(v),
            ", %.2f of the machine's" % (statistics.median(v) / statistics.median(sg[t]))
            if sg.get(t) else ""))
    dnnl = {dtype: medians(rows, dnnl_in(dtype)) for dtype in ("f32", "bf16")}
    for dtype, by_threads in dnnl.items():
        impls = sorted({r["impl"] for r in rows if dnnl_in(dtype)(r)})
        for t, v in sorted(by_threads.items()):
            vs = ""
            if sg.get(t):
                ratio = statistics.median(sg[t]) / statistics.median(v)
                vs = ("; OpenBLAS sgemm ÷ it: %.2f" % ratio if dtype == "f32"
                      else "; %.2f× OpenBLAS sgemm" % (1 / ratio))
            out.append("- oneDNN %s matmul 2048³ %s (%s), %s: %s%s" % (
                next(r["dnnl"] for r in rows if dnnl_in(dtype)(r)), dtype, ", ".join(impls),
                plural(t, "thread"), rates_text(v), vs))
    for t, v in sorted(dnnl["f32"].items()):
        if sg.get(t) and statistics.median(sg[t]) < MISMATCH * statistics.median(v):
            out.append("")
            out.append("**Warning: roofline mismatch.** On %s OpenBLAS sgemm (%s) ran at %.1f GFLOP/s, "
                       "below %.1f × oneDNN's float32 matmul (%.1f GFLOP/s): OpenBLAS's kernels are "
                       "not this machine's best, and against oneDNN's rate every share of sgemm "
                       "below would be %.2f× lower." % (plural(t, "thread"), roof_core or "?", statistics.median(sg[t]), MISMATCH,
                                  statistics.median(v),
                                  statistics.median(v) / statistics.median(sg[t])))
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

    def head_over_n(title):
        """The first two lines of a table with a column per N."""
        return ["| %s | %s |" % (title, " | ".join("N=%d" % n for n in ns)), "|---|" + "---|" * len(ns)]

    out += head_over_n("share of sgemm")
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
        out += head_over_n("share of the same-ISA sgemm (OpenBLAS kernels: %s)" % cores)
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

    # bf16 products: against oneDNN's bf16 matmul, and over attn's float32.
    bf16_vars = sorted({k[0] for k in cfg if k[0].startswith("bf16 ")})

    def over_f32(var, mode, n, **kw):
        """A bf16 configuration's speed over attn's float32 (best kernels) on the same shape."""
        b, f = get(var, mode, n, **kw), get(best, mode, n, **kw)
        return b.gflops / f.gflops if b and f else None

    def fmt_x(x):
        return "%.2f×" % x if x is not None else "-"

    if bf16_vars:
        dnnl_impls = sorted({r["impl"] for r in rows if dnnl_in("bf16")(r)})
        out.append("bf16 products (`attn bench --precision bf16`, on the engine named): rated against "
                   "oneDNN's bf16 matmul 2048³ (%s) measured right before and after each row, and "
                   "against attn's float32 `%s` kernels on the same shape in this run (speed ratio)."
                   % (", ".join(dnnl_impls) or "not measured", best))
        out.append("")
        out += head_over_n("bf16 products")
        for mode in ("forward", "backward"):
            for var in bf16_vars:
                cells = [get(var, mode, n) for n in ns]
                if any(cells):
                    out.append("| %s %s, share of oneDNN bf16 | %s |" % (var, mode, " | ".join(
                        fmt(c.dnnl_share if c else None) for c in cells)))
                    out.append("| %s %s ÷ float32 %s | %s |" % (var, mode, best, " | ".join(
                        fmt_x(over_f32(var, mode, n)) for n in ns)))
        out.append("")
        bf16_lines = [
            ("forward N=2048 D=128", dict(mode="forward", n=2048, d=128)),
            ("MHA E=512 L=2048 (projections included)", dict(mode="mha", n=2048)),
            ("forward N=2048, 1 thread", dict(mode="forward", n=2048, threads=1)),
        ]
        out.append("| bf16 products | " + " | ".join(
            "%s: share of oneDNN bf16 | %s: ÷ float32" % (v, v) for v in bf16_vars) + " |")
        out.append("|---|" + "---|---|" * len(bf16_vars))
        for name, kw in bf16_lines:
            kw = dict(kw)
            mode, n = kw.pop("mode"), kw.pop("n")
            cells = []
            for v in bf16_vars:
                c = get(v, mode, n, **kw)
                cells += [fmt(c.dnnl_share if c else None), fmt_x(over_f32(v, mode, n, **kw))]
            if any(c != "-" for c in cells):
                out.append("| %s | %s |" % (name, " | ".join(cells)))
        causal = [wall_ratio(v, "causal", "forward")[1] for v in bf16_vars]
        if any(c != "-" for c in causal):
            out.append("| causal ÷ unmasked wall time, forward N=2048 | %s |" % " | ".join(
                x for c in causal for x in (c, "")))
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

    def bf16_checks(var):
        """The bf16 targets: with AMX, forward N = 2048…8192 (D = 64 and 128)
        at ≥ 0.6 of oneDNN's bf16 matmul and ≥ 2.5× float32, backward ≥ 2×,
        causal ≤ 0.55 of unmasked, MHA ≥ 2×; with AVX512_BF16 only, forward
        ≥ 1.6× float32 and backward ≥ 1.4×. None without an engine (the
        products then run in float32) or on the tests' model of AMX."""
        engine = var.split()[1]
        if engine in ("f32", "amx-model"):
            return
        amx = engine == "amx" or (engine != "avx512bf16" and
                                  "amx_bf16" in machine.get("isa_flags", "").split())
        fwd_n = [n for n in ns if 2048 <= n <= 8192]

        def listed(name, values, ok):
            values = [(label, x) for label, x in values if x is not None]
            if values:
                checks.append((name, var, ", ".join("%s: %.2f" % lx for lx in values),
                               all(ok(x) for _, x in values)))

        if amx:
            shares = [("%d" % n, share) for n in fwd_n for share in [
                get(var, "forward", n).dnnl_share if get(var, "forward", n) else None]]
            c128 = get(var, "forward", 2048, 128)
            shares.append(("2048 D=128", c128.dnnl_share if c128 else None))
            listed("bf16 forward ≥ 0.6 of oneDNN's bf16 matmul (N = 2048…8192)", shares,
                   lambda x: x >= 0.6)
        listed("bf16 forward ≥ %s× float32 (N = 2048…8192)" % ("2.5" if amx else "1.6"),
               [("%d" % n, over_f32(var, "forward", n)) for n in fwd_n],
               lambda x: x >= (2.5 if amx else 1.6))
        listed("bf16 backward ≥ %s× float32 (N ≥ 2048)" % ("2" if amx else "1.4"),
               [("%d" % n, over_f32(var, "backward", n)) for n in ns if n >= 2048],
               lambda x: x >= (2.0 if amx else 1.4))
        if amx:
            listed("bf16 causal wall time ≤ 0.55 × unmasked (forward N=2048)",
                   [("2048", wall_ratio(var, "causal", "forward")[0])], lambda x: x <= 0.55)
            listed("bf16 MHA ≥ 2× float32 (E=512 L=2048)", [("2048", over_f32(var, "mha", 2048))],
                   lambda x: x >= 2.0)

    def same_label(var):
        return "%s (÷ %s sgemm)" % (var, same_cores[var])

    for var in isas:
        isa_checks(var, var, share_of, True)
        if var in same_cores:
            isa_checks(var, same_label(var), same_share_of, False)
    generic_checks("generic", share_of)
    if "generic" in same_cores:
        generic_checks(same_label("generic"), same_share_of)
    for var in bf16_vars:
        bf16_checks(var)
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
