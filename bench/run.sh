#!/bin/sh
# Side-by-side benchmark of attn against the machine's OpenBLAS sgemm rate,
# ggml's fused CPU attention (built from source, when it can be) and PyTorch
# 1.13, all in one run so the ratios share the machine's state. attn's
# narrower kernels (avx2 below avx512, and the portable generic one) are also
# rated against OpenBLAS forced to kernels of their own vector ISA (the
# same-ISA roofline, below). Writes
# bench/results/<stamp>.jsonl (one JSON object per measurement) and
# bench/results/<stamp>.md (the issue-11 table and target checks, made by
# bench/make_table.py), and prints the markdown.
#
#   bench/run.sh            full run (5 minutes of rows on a quiet 2-core Zen 5, ~12 on a Zen 4 VM)
#   bench/run.sh --quick    fewer rows, one round, no N >= 16384 (1 to 4 minutes)
#
# Environment: THREADS (default 2), RUNS (timed calls per row, default 5,
# after one warm-up; more for small N, fewer for N >= 16384), ROUNDS (times
# the whole list of rows is repeated, interleaved; make_table.py takes the
# median; default 2, --quick 1), PAIRS (A-B-B-A quadruples per round of each
# wall-time ratio, default 2), ISAS (attn kernels rated against the
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
# variables, attn and ggml with the environment as it is; the same-ISA sgemm
# runs without OPENBLAS_L2_SIZE and with OPENBLAS_CORETYPE set to its core.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-bench}
THREADS=${THREADS:-2}
RUNS=${RUNS:-5}
PYTHON=${PYTHON:-/usr/bin/python3}
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
ROUNDS=${ROUNDS:-$((2 - QUICK))}
PAIRS=${PAIRS:-2}
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

# The same-ISA roofline. A kernel can do at most as many flops per cycle as
# its vector ISA allows: 512-bit FMA (avx512), 256-bit FMA (avx2, ½ of that)
# and 128-bit multiply and add without FMA (generic: plain C built for
# baseline x86-64, i.e. SSE2; at most ¼). So next to the machine's own sgemm,
# those kernels are rated against OpenBLAS forced (OPENBLAS_CORETYPE) to
# kernels of the same vector ISA, measured before and after each of their
# rows like the machine's sgemm:
#   avx512  -> none: the machine's own kernels;
#   avx2    -> Haswell (AVX2 + FMA, 256-bit), only when the best kernels are
#              avx512 (on an AVX2-only CPU the machine's sgemm already is the
#              AVX2 roofline);
#   generic -> Core2 (SSE2/SSSE3, 128-bit, no FMA): the fastest of OpenBLAS's
#              128-bit kernel sets without FMA on a Zen 5 with AVX-512 (1
#              thread, 2048³: Core2 42-44 GFLOP/s; Bobcat, Penryn, Nehalem
#              and, mostly, Barcelona 33-36; Prescott 26; bench/README.md),
#              on about the instructions the generic kernel may be
#              compiled to (baseline x86-64: SSE2).
# A core is used only if OpenBLAS runs it here (it needs a DYNAMIC_ARCH
# build, and says "Core not found" and falls back to its own pick otherwise)
# and it is not the machine's own pick anyway.
same_isa_core() {
    case $1 in
        avx2) if [ "$BEST" = avx512 ]; then echo Haswell; fi ;;
        generic) echo Core2 ;;
    esac
}
SAME=         # "isa=core" pairs in use
SAME_JSON=    # the same as JSON members
for isa in $ISAS generic; do
    core=$(same_isa_core "$isa")
    case " $SAME " in *" $isa="*) continue ;; esac
    if [ -z "$core" ] || [ "$core" = "$CORE" ]; then continue; fi
    got=$(OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=$core env -u OPENBLAS_L2_SIZE "$SGEMM" 64 1 2>&1 >/dev/null |
        sed -n 's/^Core: //p' | head -n 1)
    if [ "$got" = "$core" ]; then
        SAME="$SAME $isa=$core"
        SAME_JSON="$SAME_JSON,\"$isa\":\"$core\""
    else
        note "OpenBLAS does not run $core kernels here (Core: ${got:-?}): no same-ISA sgemm for $isa"
    fi
done
SAME_JSON=${SAME_JSON#,}
same_core_of() { for p in $SAME; do if [ "${p%%=*}" = "$1" ]; then echo "${p#*=}"; fi; done; }
FLAGS=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E '^(sse4_2|avx|fma|avx2|avx512(f|bw|vl|dq|_bf16|_fp16|_vnni)|amx_(tile|bf16|int8))$' | tr '\n' ' ')
printf '{"what":"machine","date":"%s","cpu":"%s","cores":%s,"isa_flags":"%s","attn":"%s","isas":"%s","openblas_core":"%s","same_isa_cores":{%s},"env":"%s","ggml":%s,"threads":%s,"rounds":%s,"quick":%s}\n' \
    "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" \
    "$(nproc)" "${FLAGS% }" "$("$ATTN_BIN" --version)" "$ISAS" "$CORE" "$SAME_JSON" \
    "$(env | grep -E '^OPENBLAS_(CORETYPE|L2_SIZE)=' | tr '\n' ' ' | sed 's/ $//')" \
    "$([ -n "$GGML_BIN" ] && echo true || echo false)" "$THREADS" "$ROUNDS" "$QUICK" >>"$OUT"

# Every row sits between two sgemm measurements at its thread count (one
# sgemm serves as the "after" of a row and the "before" of the next);
# make_table.py rates the row against their mean. A row with a same-ISA core
# also sits between two sgemm measurements on that core, inside the
# machine's ones (native, same-ISA, row, same-ISA, native; shared with the
# next row the same way), told apart by their "coretype".
last_sgemm=
last_same=
sgemm() { OPENBLAS_NUM_THREADS=$1 blas_env "$SGEMM" 2048 7 >>"$OUT"; last_sgemm=$1; }
same_sgemm() {
    OPENBLAS_NUM_THREADS=$2 OPENBLAS_CORETYPE=$1 env -u OPENBLAS_L2_SIZE "$SGEMM" 2048 7 >>"$OUT"
    last_same="$1 $2"
}
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
# row CORE COMMAND...: CORE is the row's same-ISA core, or empty.
row() {
    core=$1; shift
    t=$(threads_of "$@")
    [ "$last_sgemm" = "$t" ] || sgemm "$t"
    [ -z "$core" ] || [ "$last_same" = "$core $t" ] || same_sgemm "$core" "$t"
    printf '{"what":"load","loadavg":%s}\n' "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT"
    "$@" >>"$OUT"
    last_same=
    [ -z "$core" ] || same_sgemm "$core" "$t"
    sgemm "$t"
}
attn() {
    isa=$1; shift
    note "ATTN_ARCH=$isa attn bench $*"
    row "$(same_core_of "$isa")" env ATTN_ARCH="$isa" "$ATTN_BIN" bench --json $(runs_of "$@") "$@"
}
torchb() { [ "$HAVE_TORCH" = 1 ] || return 0; note "torch $*"; row "" blas_env "$PYTHON" "$ROOT/bench/torch_attention.py" $(runs_of "$@") "$@"; }
ggml() { [ -n "$GGML_BIN" ] || return 0; note "ggml $*"; row "" "$GGML_BIN" $(runs_of "$@") "$@"; }

# paired NAME ISA "ARGS_A" "ARGS_B": the wall-time ratios (causal ÷ unmasked,
# 1 thread ÷ T threads) from runs right next to each other, A B B A, PAIRS
# times, with no sgemm between: the two sides share the machine's state,
# which rows minutes apart do not. ISA "sgemm": OpenBLAS sgemm 2048³ on
# ARGS threads, for what the machine's own GEMM gains from more threads
# at the same moments. Tagged "pair"/"slot"/"rep" for
# make_table.py, which keeps them out of the per-configuration medians.
paired() {
    name=$1 isa=$2 a=$3 b=$4
    note "paired $name: $isa $a | $b"
    k=1
    while [ $k -le "$PAIRS" ]; do
        for slot in a b b a; do
            if [ $slot = a ]; then args=$a; else args=$b; fi
            # shellcheck disable=SC2086 # word splitting of the argument lists is intended
            if [ "$isa" = sgemm ]; then
                OPENBLAS_NUM_THREADS=$args blas_env "$SGEMM" 2048 7
            else
                ATTN_ARCH=$isa "$ATTN_BIN" bench --json $(runs_of $args) $args
            fi | sed "s/^{/{\"pair\":\"$name\",\"slot\":\"$slot\",\"rep\":\"$round.$k\",/" >>"$OUT"
        done
        k=$((k + 1))
    done
}

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
        for mode in forward backward; do
            paired "causal-$mode" "$isa" "--seq 2048 --mode $mode --threads $T" \
                "--seq 2048 --mode $mode --causal --threads $T"
            paired "threads-$mode" "$isa" "--seq 2048 --mode $mode --threads 1" \
                "--seq 2048 --mode $mode --threads $T"
        done
    done
    paired threads-sgemm sgemm 1 "$T"
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
