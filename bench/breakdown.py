#!/usr/bin/env python3
"""Where the fused forward and backward spend their time: runs one
`attn bench` configuration under perf (time samples) or callgrind
(instruction counts) and sums the functions into the parts the benchmark
tables speak of. Prints a markdown table. Standard library only.

    bench/breakdown.py --tool callgrind --isa avx2        # instructions; valgrind has no AVX-512
    bench/breakdown.py --tool perf --isa avx512 --threads 2
    bench/breakdown.py --compare-causal --threads 2       # why causal costs more than half

--compare-causal runs every mode unmasked and causal with the same number
of calls and prints each part's causal samples over all of the unmasked
run's: the column sums to the causal ÷ unmasked ratio of the two runs'
time, so a part above half its unmasked share is where causal keeps cost
that does not halve.

perf samples the cpu-clock software event (no hardware counters needed),
so on a shared machine it still counts this process's own CPU time only.
Under perf the whole process is sampled: the bench's data fill and, in
backward mode, the one untimed forward that makes `out` and `lse`: the
first lands in "setup", which the shares leave out, the second among the
forward's parts (1 forward to --runs + 1 backwards). callgrind collects
inside sdpa_fused_forward / sdpa_fused_backward only.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# (part, pattern on "dso symbol"), first match wins. GCC outlines the
# backward's OpenMP regions in source order: ._omp_fn.0 computes every
# row's D and statistics up front (with sink gradients only; otherwise the
# tasks do, in row_quantities), ._omp_fn.1 runs the tasks, ._omp_fn.2 sums
# the dQ partials.
PARTS = [
    ("GEMM microkernel", r"_gemm|gemm_"),
    ("exp / softmax", r"softmax|_probs|dsoftmax|vexp|\bexpf|__exp"),
    ("packing (transposes, copies)", r"transpose|pack|memcpy|memmove"),
    ("reductions (D, dQ partials, row finish, LSE)",
     r"backward\._omp_fn\.[02]\b|row_quantities|finish_row|merge_row|logf"),
    ("synchronisation (OpenMP runtime)", r"^libgomp"),
    ("tile planning, task loop, zeroing", r"plan_tile|_omp_fn|_task|row_keys|memset"),
]
SETUP = r"run_bench|alloc_filled|kallsyms|^ld-linux|^\[kernel"  # data fill, page faults, loader


def run_perf(cmd, env, tmp):
    data = os.path.join(tmp, "perf.data")
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4999", "-o", data, "--"] + cmd,
                   env=env, check=True, stdout=subprocess.DEVNULL)
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "-q", "--sort", "dso,sym",
                          "-F", "sample,dso,sym", "--percent-limit", "0"],
                         capture_output=True, text=True, check=True).stdout
    for line in rep.splitlines():  # samples, dso, [.] or [k], symbol
        m = re.match(r"\s*(\d+)\s+(\S+)\s+\[.\]\s+(.*)", line)
        if m:
            yield m.group(2) + " " + m.group(3).strip(), float(m.group(1))


def run_callgrind(cmd, env, tmp, mode):
    out = os.path.join(tmp, "callgrind.out")
    subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=no",
                    "--toggle-collect=sdpa_fused_" + ("forward" if mode == "forward" else "backward"),
                    "--callgrind-out-file=" + out] + cmd, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rep = subprocess.run(["callgrind_annotate", "--threshold=100", out], capture_output=True,
                         text=True, check=True).stdout
    for line in rep.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+\S*?:(\S+)\s+\[(\S+)\]", line)
        if m:
            yield os.path.basename(m.group(3)) + " " + m.group(2), float(m.group(1).replace(",", ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", choices=["perf", "callgrind"], default="perf")
    ap.add_argument("--isa", default="avx512", help="ATTN_ARCH for the run")
    ap.add_argument("--modes", default="forward,backward")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--runs", type=int, default=None, help="timed calls (perf 10, callgrind 1)")
    ap.add_argument("--attn", default="build/attn", help="the attn binary")
    ap.add_argument("--causal", action="store_true", help="causal attention")
    ap.add_argument("--compare-causal", action="store_true",
                    help="unmasked and causal side by side (perf)")
    a = ap.parse_args()
    if a.compare_causal and a.tool != "perf":
        ap.error("--compare-causal needs --tool perf")
    runs = a.runs or (1 if a.tool == "callgrind" else 10)
    env = dict(os.environ, ATTN_ARCH=a.isa)
    unit = "time (cpu-clock samples)" if a.tool == "perf" else "instructions (Ir)"
    print("`bench/breakdown.py %s`: %s, ATTN_ARCH=%s, B=1, H=%d, N=%d, D=%d, %d thread%s, %d timed "
          "call%s%s." % (" ".join(sys.argv[1:]), unit, a.isa, a.heads, a.seq, a.head_dim, a.threads,
                         "" if a.threads == 1 else "s", runs, "" if runs == 1 else "s",
                         ", causal" if a.causal else ""))
    print()
    modes = a.modes.split(",")
    # Columns: (mode, causal); with --compare-causal each mode unmasked and causal.
    runs_of = [(m, c) for m in modes for c in ((False, True) if a.compare_causal else (a.causal,))]
    parts, totals, setup = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode, causal in runs_of:
            cmd = [a.attn, "bench", "--mode", mode, "--seq", str(a.seq), "--heads", str(a.heads),
                   "--head-dim", str(a.head_dim), "--threads", str(a.threads), "--runs", str(runs),
                   "--warmup", "1" if a.tool == "perf" else "0"] + (["--causal"] if causal else [])
            rows = list(run_perf(cmd, env, tmp) if a.tool == "perf"
                        else run_callgrind(cmd, env, tmp, mode))
            outside = sum(v for name, v in rows if re.search(SETUP, name))
            total = sum(v for _, v in rows) - outside
            part = {}
            for name, v in rows:
                if not re.search(SETUP, name):
                    p = next((p for p, rx in PARTS if re.search(rx, name)), "other")
                    part[p] = part.get(p, 0.0) + v
            parts[mode, causal], totals[mode, causal] = part, total
            setup[mode, causal] = 100.0 * outside / (total + outside)
    names = [p for p, _ in PARTS] + ["other"]
    if a.compare_causal:
        # Sample counts at one rate over the same number of calls: the
        # causal run's over the unmasked run's total is their time ratio.
        print("| part | " + " | ".join("%s: unmasked share | causal ÷ unmasked total" % m
                                       for m in modes) + " |")
        print("|---|" + "---|---|" * len(modes))
        cells = {}
        for m in modes:
            u, c = parts[m, False], parts[m, True]
            for p in names:
                cells[m, p] = (100.0 * u.get(p, 0.0) / totals[m, False],
                               c.get(p, 0.0) / totals[m, False])
        for p in names:
            if any(p in parts[m, k] for m in modes for k in (False, True)):
                print("| %s | %s |" % (p, " | ".join("%.1f%% | %.3f" % cells[m, p] for m in modes)))
        print("| all | %s |" % " | ".join("100%% | **%.3f**" % (totals[m, True] / totals[m, False])
                                          for m in modes))
    else:
        print("| part | " + " | ".join(m for m, _ in runs_of) + " |")
        print("|---|" + "---|" * len(runs_of))
        for p in names:
            if any(p in parts[r] for r in runs_of):
                print("| %s | %s |" % (p, " | ".join(
                    "%.1f%%" % (100.0 * parts[r].get(p, 0.0) / totals[r]) for r in runs_of)))
    if a.tool == "perf":
        print()
        print("Left out: the bench's setup, page faults and other kernel time, %s of the samples."
              % ", ".join("%.1f%% (%s%s)" % (setup[r], r[0], ", causal" if r[1] else "")
                          for r in runs_of))


if __name__ == "__main__":
    main()
