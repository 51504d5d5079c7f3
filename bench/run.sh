#!/bin/sh
# Side-by-side benchmark of attn against the machine's OpenBLAS sgemm rate,
# ggml's fused CPU attention (built from source, when it can be) and PyTorch
# 1.13, all in one run so the ratios share the machine's state. Writes
# bench/results/<stamp>.jsonl (one JSON object per measurement) and
# bench/results/<stamp>.md (the issue-11 table and target checks, made by
# bench/make_table.py), and prints the markdown.
#
#   bench/run.sh            full run (~12 minutes of rows on a quiet 2-core machine)
#   bench/run.sh --quick    fewer rows, one round, no N >= 16384 (~4 minutes)
#
# Environment: THREADS (default 2), RUNS (timed calls per row, default 5,
# after one warm-up; more for small N, fewer for N >= 16384), ROUNDS (times
# the whole list of rows is repeated, interleaved; make_table.py takes the
# median; default 2, --quick 1), ISAS (attn kernels rated against the
# targets, default: the best the CPU has, and avx2 below avx512), BUILD_DIR
# (default build-bench), ATTN_BIN (use this attn binary instead of building
# one), PYTHON (default /usr/bin/python3, needs torch; rows skipped without
# it), GGML (0: no ggml rows; default: build them with bench/ggml/build.sh,
# skipped if that fails), WAIT_QUIET (seconds to wait for a load average
# below 0.5 first, default 600).
#
# Needs a C compiler and OpenBLAS (libopenblas-dev) for the sgemm rate;
# attn itself does not need OpenBLAS. Some CPUs get OPENBLAS_CORETYPE (and
# OPENBLAS_L2_SIZE) from the environment, which makes sgemm run older,
# slower kernels: the sgemm and PyTorch commands run without those two
# variables, attn and ggml with the environment as it is.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-bench}
THREADS=${THREADS:-2}
RUNS=${RUNS:-5}
PYTHON=${PYTHON:-/usr/bin/python3}
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
ROUNDS=${ROUNDS:-$((2 - QUICK))}
note() { echo "bench: $*" >&2; }
# sgemm and PyTorch: the machine's own BLAS kernels, whatever the environment forces.
blas_env() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }

mkdir -p "$BUILD" "$ROOT/bench/results"
if [ -z "${ATTN_BIN:-}" ]; then
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF >/dev/null
    cmake --build "$BUILD" -j2 --target attn >/dev/null
    ATTN_BIN=$BUILD/attn
fi
SGEMM=$BUILD/sgemm_rate
cc -O2 "$ROOT/bench/sgemm_rate.c" -o "$SGEMM" -lopenblas ||
    { note "cannot build sgemm_rate against OpenBLAS (libopenblas-dev)"; exit 1; }
HAVE_TORCH=1
"$PYTHON" -c "import torch" 2>/dev/null || { HAVE_TORCH=0; note "no torch in $PYTHON: no PyTorch rows"; }
GGML_BIN=
if [ "${GGML:-1}" != 0 ]; then
    GGML_BIN=$("$ROOT/bench/ggml/build.sh" "$BUILD/ggml" 2>"$BUILD/ggml-build.log" | tail -n 1) ||
        { GGML_BIN=; note "ggml not built (see $BUILD/ggml-build.log): no ggml rows"; }
fi
BEST=$("$ATTN_BIN" --version | sed 's/.*kernels: \([a-z0-9]*\).*/\1/')
if [ -z "${ISAS:-}" ]; then
    ISAS=$BEST
    [ "$BEST" = avx512 ] && ISAS="avx512 avx2"
fi

# This machine may be shared: wait for the 1-minute load average to drop
# below 0.5, and record the load before every row so noisy rows show.
WAIT_QUIET=${WAIT_QUIET:-600}
waited=0
while [ "$(awk '{print ($1 < 0.5)}' /proc/loadavg)" = 0 ] && [ $waited -lt "$WAIT_QUIET" ]; do
    [ $waited = 0 ] && note "waiting for a quiet machine (load $(cut -d' ' -f1 /proc/loadavg))"
    sleep 10
    waited=$((waited + 10))
done

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$ROOT/bench/results/$STAMP.jsonl
: >"$OUT"
START=$(date +%s)

# The machine, for the record: OpenBLAS names the kernel it picked when
# OPENBLAS_VERBOSE=2 ("Core: SkylakeX").
CORE=$(OPENBLAS_VERBOSE=2 blas_env "$SGEMM" 64 1 2>&1 >/dev/null | sed -n 's/^Core: //p' | head -n 1)
FLAGS=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E '^(sse4_2|avx|fma|avx2|avx512(f|bw|vl|dq|_bf16|_fp16|_vnni)|amx_(tile|bf16|int8))$' | tr '\n' ' ')
printf '{"what":"machine","date":"%s","cpu":"%s","cores":%s,"isa_flags":"%s","attn":"%s","isas":"%s","openblas_core":"%s","env":"%s","ggml":%s,"threads":%s,"rounds":%s,"quick":%s}\n' \
    "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" \
    "$(nproc)" "${FLAGS% }" "$("$ATTN_BIN" --version)" "$ISAS" "$CORE" \
    "$(env | grep -E '^OPENBLAS_(CORETYPE|L2_SIZE)=' | tr '\n' ' ' | sed 's/ $//')" \
    "$([ -n "$GGML_BIN" ] && echo true || echo false)" "$THREADS" "$ROUNDS" "$QUICK" >>"$OUT"

# Every row sits between two sgemm measurements at its thread count (one
# sgemm serves as the "after" of a row and the "before" of the next);
# make_table.py rates the row against their mean.
last_sgemm=
sgemm() { OPENBLAS_NUM_THREADS=$1 blas_env "$SGEMM" 2048 7 >>"$OUT"; last_sgemm=$1; }
threads_of() { t=$THREADS; while [ $# -gt 0 ]; do [ "$1" = --threads ] && t=$2; shift; done; echo "$t"; }
seq_of() { n=1024; while [ $# -gt 0 ]; do [ "$1" = --seq ] && n=$2; shift; done; echo "$n"; }
# Timed calls per row: enough for short rows to give a stable median,
# few for the longest.
runs_of() {
    n=$(seq_of "$@")
    if [ "$n" -le 512 ]; then echo "--runs $((RUNS * 5)) --warmup 2"
    elif [ "$n" -ge 32768 ]; then echo "--runs 2 --warmup 1"
    elif [ "$n" -ge 16384 ]; then echo "--runs 3 --warmup 1"
    else echo "--runs $RUNS --warmup 1"; fi
}
row() {
    t=$(threads_of "$@")
    [ "$last_sgemm" = "$t" ] || sgemm "$t"
    printf '{"what":"load","loadavg":%s}\n' "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT"
    "$@" >>"$OUT"
    sgemm "$t"
}
attn() { isa=$1; shift; note "ATTN_ARCH=$isa attn bench $*"; row env ATTN_ARCH="$isa" "$ATTN_BIN" bench --json $(runs_of "$@") "$@"; }
torchb() { [ "$HAVE_TORCH" = 1 ] || return 0; note "torch $*"; row blas_env "$PYTHON" "$ROOT/bench/torch_attention.py" $(runs_of "$@") "$@"; }
ggml() { [ -n "$GGML_BIN" ] || return 0; note "ggml $*"; row "$GGML_BIN" $(runs_of "$@") "$@"; }

T=$THREADS
SMALL="--batch 8 --heads 8 --seq 128"    # B·H = 64
one_round() {
    for isa in $ISAS; do
        attn "$isa" $SMALL --threads $T
        for n in 512 1024 2048 4096 8192; do attn "$isa" --seq $n --threads $T; done
        if [ $QUICK = 0 ]; then
            attn "$isa" --seq 16384 --threads $T
            if [ "$isa" = "$BEST" ] && [ "$round" = 1 ]; then attn "$isa" --seq 32768 --threads $T; fi
        fi
        attn "$isa" --seq 2048 --head-dim 128 --threads $T
        attn "$isa" --seq 2048 --causal --threads $T
        for n in 1024 2048 4096; do attn "$isa" --seq $n --mode backward --threads $T; done
        attn "$isa" --seq 2048 --mode backward --causal --threads $T
        attn "$isa" --seq 2048 --mode mha --threads $T
        attn "$isa" --seq 2048 --threads 1
        attn "$isa" --seq 2048 --mode backward --threads 1
    done
    attn generic --seq 2048 --threads $T
    attn generic --seq 2048 --mode backward --threads $T
    attn generic --seq 2048 --mode mha --threads $T
    ggml $SMALL --threads $T
    for n in 512 1024 2048 4096; do ggml --seq $n --threads $T; done
    [ $QUICK = 1 ] || ggml --seq 8192 --threads $T
    ggml --seq 2048 --causal --threads $T
    ggml --seq 2048 --kv f16 --threads $T
    torchb $SMALL --threads $T
    torchb --seq 2048 --threads $T
    torchb --seq 2048 --mode backward --threads $T
    torchb --seq 2048 --mode mha --threads $T
}
round=1
while [ $round -le "$ROUNDS" ]; do
    note "round $round of $ROUNDS"
    one_round
    round=$((round + 1))
done
printf '{"what":"end","seconds":%s}\n' $(($(date +%s) - START)) >>"$OUT"

"$PYTHON" "$ROOT/bench/make_table.py" "$OUT" >"${OUT%.jsonl}.md"
cat "${OUT%.jsonl}.md"
note "wrote $OUT and ${OUT%.jsonl}.md"
