#!/bin/sh
# Side-by-side benchmark of attn against the machine's OpenBLAS sgemm rate,
# attn's own reference path and PyTorch 1.13, all in one run so the ratios
# share the machine's state. Writes bench/results/<stamp>.jsonl (one JSON
# object per measurement) and bench/results/<stamp>.md (the tables and the
# issue-3 target checks), and prints the markdown.
#
#   bench/run.sh [--quick]        --quick: fewer configurations, no N=32768
#
# Environment: THREADS (default 2), RUNS (default 5), BUILD_DIR (default
# build-bench), ATTN_BIN (use this attn binary instead of building one),
# PYTHON (default /usr/bin/python3, needs torch; skipped when missing).
# Needs a C compiler and OpenBLAS (libopenblas-dev) for the sgemm rate;
# attn itself does not need OpenBLAS.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-bench}
THREADS=${THREADS:-2}
RUNS=${RUNS:-5}
PYTHON=${PYTHON:-/usr/bin/python3}
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1

if [ -z "${ATTN_BIN:-}" ]; then
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF >/dev/null
    cmake --build "$BUILD" -j2 --target attn >/dev/null
    ATTN_BIN=$BUILD/attn
fi
mkdir -p "$BUILD" "$ROOT/bench/results"
SGEMM=$BUILD/sgemm_rate
if ! cc -O2 "$ROOT/bench/sgemm_rate.c" -o "$SGEMM" -lopenblas 2>/dev/null; then
    echo "bench: cannot build sgemm_rate against OpenBLAS; no sgemm reference" >&2
    SGEMM=
fi
HAVE_TORCH=1
"$PYTHON" -c "import torch" 2>/dev/null || { HAVE_TORCH=0; echo "bench: no torch in $PYTHON" >&2; }

# This machine may be shared: wait (up to WAIT_QUIET seconds, default 600)
# for the 1-minute load average to drop below 0.5, and record the load
# before every measurement so noisy rows can be recognised.
WAIT_QUIET=${WAIT_QUIET:-600}
waited=0
while [ "$(cut -d' ' -f1 /proc/loadavg | awk '{print ($1 < 0.5)}')" = 0 ] && [ $waited -lt "$WAIT_QUIET" ]; do
    [ $waited = 0 ] && echo "bench: waiting for a quiet machine (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    sleep 10
    waited=$((waited + 10))
done

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$ROOT/bench/results/$STAMP.jsonl
: >"$OUT"
note() { echo "bench: $*" >&2; }
load() { printf '{"what":"load","loadavg":%s}\n' "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT"; }
sgemm() { [ -n "$SGEMM" ] || return 0; OPENBLAS_NUM_THREADS=$1 "$SGEMM" 2048 7 >>"$OUT"; }
# Every measurement sits between two sgemm measurements at the same thread
# count; make_table.py rates it against their mean (side by side, so slow
# changes in the machine's state cancel out of the ratios).
threads_of() { t=$THREADS; while [ $# -gt 0 ]; do [ "$1" = --threads ] && t=$2; shift; done; echo "$t"; }
attn() {
    t=$(threads_of "$@")
    note "attn bench $*"
    load; sgemm "$t"
    "$ATTN_BIN" bench --json --runs "$RUNS" --warmup 1 "$@" >>"$OUT"
    sgemm "$t"
}
torchb() {
    [ "$HAVE_TORCH" = 1 ] || return 0
    t=$(threads_of "$@")
    note "torch $*"
    load; sgemm "$t"
    "$PYTHON" "$ROOT/bench/torch_attention.py" --runs "$RUNS" "$@" >>"$OUT"
    sgemm "$t"
}

# Machine description for the record.
{
    printf '{"what":"machine","cpu":"%s","cores":%s,"isa":"%s","attn":"%s"}\n' \
        "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$(nproc)" \
        "$("$ATTN_BIN" --version | sed 's/.*kernels: \([a-z0-9]*\).*/\1/')" \
        "$("$ATTN_BIN" --version)"
} >>"$OUT"

T=$THREADS
# Forward, no mask: N sweep (B=1, H=8, D=64), then D=128, causal, 1 thread.
for n in 512 1024 2048; do attn --seq $n --threads $T; done
[ $QUICK = 1 ] || attn --seq 4096 --threads $T
attn --seq 2048 --head-dim 128 --threads $T
attn --seq 2048 --causal --threads $T
attn --seq 2048 --threads 1
attn --seq 2048 --mode backward --threads $T
attn --seq 2048 --mode backward --causal --threads $T
attn --seq 2048 --mode backward --threads 1
attn --seq 2048 --mode mha --threads $T
# attn's plain (reference) path, same shapes.
attn --seq 512 --threads $T --path reference
attn --seq 2048 --threads $T --path reference
attn --seq 2048 --mode backward --threads $T --path reference
# PyTorch 1.13: matmul + softmax + matmul, autograd backward, nn.MultiheadAttention.
torchb --seq 512 --threads $T
torchb --seq 1024 --threads $T
torchb --seq 2048 --threads $T
torchb --seq 2048 --head-dim 128 --threads $T
torchb --seq 2048 --causal --threads $T
torchb --seq 2048 --mode backward --threads $T
torchb --seq 2048 --mode mha --threads $T
# Memory: forward (untimed) + backward at N=32768 in a process of its own.
if [ $QUICK = 0 ]; then
    note "attn bench --seq 32768 --mode backward (memory)"
    load
    "$ATTN_BIN" bench --json --runs 1 --warmup 0 --seq 32768 --mode backward --threads "$T" >>"$OUT"
fi

"$PYTHON" "$ROOT/bench/make_table.py" "$OUT" >"${OUT%.jsonl}.md"
cat "${OUT%.jsonl}.md"
note "wrote $OUT and ${OUT%.jsonl}.md"
