#!/usr/bin/env python3
"""List the loops of compiled SIMD kernels that keep FMA accumulators on the stack.

GCC sometimes leaves an accumulator array in memory (an index it could not
make constant, a live range split around an inner loop): the loop then loads,
multiplies and stores every accumulator each iteration, or stores them all
after every iteration, and runs at a fraction of its FMA rate with the same
results. Tests cannot see it; this scan of the disassembly can.

For each loop (a backward jump, at most --max-len instructions) that holds
FMAs, it counts
  round trips   FMAs whose memory operand is a stack slot stored back within
                the next five instructions;
  stack stores  vector stores to the stack;
and prints the loops with a round trip, or with at least --stores stack
stores per FMA. These are candidates to read, not verdicts: registers saved
around a call on a rare path inside a loop show up too.

usage: scripts/stack_accumulators.py [--stores R] [--max-len N] [OBJECT.o ...]
(default: the x86 SIMD objects of build/, after `make`)
"""
import argparse
import glob
import re
import subprocess
import sys

FMA = re.compile(r"\bv(fn?madd|fn?msub|dpbf16)\w*")
STACK_SLOT = re.compile(r"(-?0x[0-9a-f]+\(%r[sb]p\))")
STACK_STORE = re.compile(r"vmov\w*\s+%[xyz]mm\d+,.*\(%r[sb]p\)")
JUMP = re.compile(r"j\w+\s+([0-9a-f]+)")
FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")
INSTRUCTION = re.compile(r"\s*([0-9a-f]+):\s+(.*)")

DEFAULT_OBJECTS = ("build/CMakeFiles/attn_objects.dir/src/kernels/avx*.c.o",
                   "build/CMakeFiles/attn_objects.dir/src/kernels/amx.c.o",
                   "build/CMakeFiles/attn_objects.dir/src/infer/decode_rows_avx*.c.o")


def functions(path):
    """(name, [(address, instruction)]) for each function of an object file."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], check=True,
                         capture_output=True, text=True).stdout
    name, body = None, []
    for line in out.splitlines():
        m = FUNCTION.match(line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
        elif (m := INSTRUCTION.match(line)):
            body.append((int(m.group(1), 16), m.group(2)))
    if name:
        yield name, body


def round_trips(body):
    """FMAs whose stack operand is stored back within five instructions."""
    n = 0
    for i, (_, ins) in enumerate(body):
        slot = FMA.search(ins) and STACK_SLOT.search(ins)
        if slot and any(re.search(r"vmov\w*\s+%[xyz]mm\d+," + re.escape(slot.group(1)), later)
                        for _, later in body[i + 1:i + 6]):
            n += 1
    return n


def suspicious_loops(code, max_len, stores_per_fma):
    seen = set()
    for address, ins in code:
        m = JUMP.match(ins)
        if not m or int(m.group(1), 16) >= address:
            continue
        start = int(m.group(1), 16)
        body = [x for x in code if start <= x[0] <= address]
        if start in seen or len(body) > max_len:
            continue
        fmas = sum(bool(FMA.search(i)) for _, i in body)
        if not fmas:
            continue
        stores = sum(bool(STACK_STORE.search(i)) for _, i in body)
        trips = round_trips(body)
        if trips or stores >= stores_per_fma * fmas:
            seen.add(start)
            yield start, len(body), fmas, trips, stores


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("objects", nargs="*", help="object files (default: build/'s x86 SIMD objects)")
    ap.add_argument("--stores", type=float, default=0.5,
                    help="report loops with at least this many stack stores per FMA (default 0.5)")
    ap.add_argument("--max-len", type=int, default=150,
                    help="longest loop body, in instructions, to look at (default 150)")
    args = ap.parse_args()
    objects = args.objects or sorted(p for g in DEFAULT_OBJECTS for p in glob.glob(g))
    if not objects:
        sys.exit("stack_accumulators: no object files (run `make` first, or name them)")
    found = 0
    for path in objects:
        for name, code in functions(path):
            for start, length, fmas, trips, stores in suspicious_loops(code, args.max_len,
                                                                       args.stores):
                found += 1
                print(f"{path.rsplit('/', 1)[-1]} {name} loop at {start:#x}: {length} instructions, "
                      f"{fmas} FMAs, {trips} stack round trips, {stores} stack stores")
    print(f"{found} loop(s) in {len(objects)} object(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
