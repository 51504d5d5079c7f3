#!/bin/sh
# Side-by-side benchmark of attn against the machine's OpenBLAS sgemm rate,
# oneDNN's matmul (float32, and bf16 for attn's bf16 products: the matrix
# engines' roofline), ggml's fused CPU attention (built from source, when it
# can be) and PyTorch 1.13, all in one run so the ratios share the machine's
# state. attn's narrower kernels (avx2 below avx512, and the portable generic
# one) are also rated against OpenBLAS forced to kernels of their own vector
# ISA (the same-ISA roofline, below). Writes
# bench/results/<stamp>.jsonl (one JSON object per measurement) and
# bench/results/<stamp>.md (the tables and target checks, made by
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
# oneDNN (libdnnl-dev) for its rows, which are left out without it; attn
# itself needs neither. OpenBLAS picks its kernels by CPU model and falls
# back to old ones on CPUs it does not know (0.3.21 runs Prescott's, 128-bit
# SSE3, on Emerald Rapids), and some machines set OPENBLAS_CORETYPE (and
# OPENBLAS_L2_SIZE) in the environment: so the sgemm and PyTorch commands
# run on the best kernels the CPU's ISA allows (below), without
# OPENBLAS_L2_SIZE; attn and ggml with the environment as it is; the
# same-ISA sgemm without OPENBLAS_L2_SIZE and with OPENBLAS_CORETYPE set to
# its core.
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
# sgemm and PyTorch: OpenBLAS on the best kernels the CPU's ISA allows
# (FORCE, chosen below; empty: OpenBLAS's own pick), whatever the
# environment forces.
FORCE=
blas_env() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${FORCE:+OPENBLAS_CORETYPE=$FORCE} "$@"; }

mkdir -p "$BUILD" "$ROOT/bench/results"
if [ -z "${ATTN_BIN:-}" ]; then
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF >/dev/null
    cmake --build "$BUILD" -j2 --target attn >/dev/null
    ATTN_BIN=$BUILD/attn
fi
SGEMM=$BUILD/sgemm_rate
cc -O2 "$ROOT/bench/sgemm_rate.c" -o "$SGEMM" -lopenblas ||
    { note "cannot build sgemm_rate against OpenBLAS (libopenblas-dev)"; exit 1; }
# oneDNN's matmul in the modes it has a real (not reference) kernel for here.
DNNL=$BUILD/dnnl_rate
DNNL_MODES=
if cc -O2 -fopenmp "$ROOT/bench/dnnl_rate.c" -o "$DNNL" -ldnnl 2>"$BUILD/dnnl-build.log"; then
    for m in f32 bf16; do
        if OMP_NUM_THREADS=1 "$DNNL" $m 64 1 >/dev/null 2>"$BUILD/dnnl-$m.log"; then
            DNNL_MODES="$DNNL_MODES $m"
        else
            note "no oneDNN $m row: $(cat "$BUILD/dnnl-$m.log")"
        fi
    done
else
    note "cannot build dnnl_rate against oneDNN (libdnnl-dev; see $BUILD/dnnl-build.log): no oneDNN rows"
fi
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

# The sgemm roofline's kernels. OpenBLAS picks them by CPU model and, on a
# CPU it does not know, falls back to old ones (0.3.21 on Emerald Rapids:
# Prescott, 128-bit SSE3, about a sixth of the AVX-512 kernels' rate). So
# sgemm runs on the best kernels the CPU's ISA flags allow: OpenBLAS's own
# pick when it is one of them, else the first of them that OpenBLAS runs
# when forced (OPENBLAS_CORETYPE; 0.3.21 does not know the name Cooperlake
# and falls back to its own pick, so SkylakeX, the same sgemm kernels, is
# next):
#   AVX-512 F, BW and VL, with BF16 -> Cooperlake, SkylakeX
#   AVX-512 F, BW and VL            -> SkylakeX
#   AVX2 and FMA                    -> Haswell, Zen (AVX2 kernels too)
#   anything else                   -> OpenBLAS's own pick
# (SapphireRapids, which newer OpenBLAS knows, counts as AVX-512 too.)
core_of() { # the kernels OpenBLAS runs with OPENBLAS_CORETYPE=$1 (empty: unset)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${1:+OPENBLAS_CORETYPE=$1} "$SGEMM" 64 1 |
        sed -n 's/.*"core":"\([^"]*\)".*/\1/p'
}
CPU_FLAGS=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has_flag() { case $CPU_FLAGS in *" $1 "*) return 0 ;; esac; return 1; }
best_cores() {
    if has_flag avx512f && has_flag avx512bw && has_flag avx512vl; then
        if has_flag avx512_bf16 || has_flag avx512bf16; then echo Cooperlake SkylakeX SapphireRapids
        else echo SkylakeX; fi
    elif has_flag avx2 && has_flag fma; then
        echo Haswell Zen
    fi
}
OWN_CORE=$(core_of "")
CORE=$OWN_CORE
BEST_CORES=$(best_cores)
case " $BEST_CORES " in
    *" $OWN_CORE "*) ;;
    *)
        for c in $BEST_CORES; do
            if [ "$(core_of "$c")" = "$c" ]; then CORE=$c FORCE=$c; break; fi
        done
        if [ -n "$FORCE" ]; then
            note "OpenBLAS picks $OWN_CORE kernels here: sgemm and PyTorch run OPENBLAS_CORETYPE=$FORCE"
        elif [ -n "$BEST_CORES" ]; then
            note "OpenBLAS runs none of $BEST_CORES here: sgemm on its own pick, $OWN_CORE"
        fi
        ;;
esac

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
    got=$(core_of "$core")
    if [ "$got" = "$core" ]; then
        SAME="$SAME $isa=$core"
        SAME_JSON="$SAME_JSON,\"$isa\":\"$core\""
    else
        note "OpenBLAS does not run $core kernels here (Core: ${got:-?}): no same-ISA sgemm for $isa"
    fi
done
SAME_JSON=${SAME_JSON#,}
same_core_of() { for p in $SAME; do if [ "${p%%=*}" = "$1" ]; then echo "${p#*=}"; fi; done; }
FLAGS=$(echo "$CPU_FLAGS" | tr ' ' '\n' |
    grep -E '^(sse4_2|avx|fma|avx2|avx512(f|bw|vl|dq|_bf16|_fp16|_vnni)|amx_(tile|bf16|int8))$' | tr '\n' ' ')
printf '{"what":"machine","date":"%s","cpu":"%s","cores":%s,"isa_flags":"%s","attn":"%s","isas":"%s","openblas_core":"%s","openblas_coretype":%s,"openblas_own_core":"%s","openblas_best_cores":"%s","same_isa_cores":{%s},"dnnl":"%s","env":"%s","ggml":%s,"threads":%s,"rounds":%s,"quick":%s}\n' \
    "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" \
    "$(nproc)" "${FLAGS% }" "$("$ATTN_BIN" --version)" "$ISAS" "$CORE" \
    "$([ -n "$FORCE" ] && echo "\"$FORCE\"" || echo null)" "$OWN_CORE" "$BEST_CORES" "$SAME_JSON" "${DNNL_MODES# }" \
    "$(env | grep -E '^OPENBLAS_(CORETYPE|L2_SIZE)=' | tr '\n' ' ' | sed 's/ $//')" \
    "$([ -n "$GGML_BIN" ] && echo true || echo false)" "$THREADS" "$ROUNDS" "$QUICK" >>"$OUT"
T=$THREADS
ROOF_THREADS=$(printf '%s\n' 1 "$T" | sort -un)
# OpenBLAS's own pick, for the record, where sgemm runs forced kernels
# ("coretype": null in these lines, the forced core in the roofline's).
if [ -n "$FORCE" ]; then
    for t in $ROOF_THREADS; do
        OPENBLAS_NUM_THREADS=$t env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$SGEMM" 2048 3 >>"$OUT"
    done
fi

# Every row sits between two sgemm measurements at its thread count (one
# sgemm serves as the "after" of a row and the "before" of the next);
# make_table.py rates the row against their mean. A row with a roofline of
# its own also sits between two measurements of that, inside the sgemm ones
# (sgemm, own, row, own, sgemm; shared with the next row the same way): a
# same-ISA core's sgemm, told apart by its "coretype", or, for attn's bf16
# rows, oneDNN's bf16 matmul.
last_sgemm=
last_own=
sgemm() { OPENBLAS_NUM_THREADS=$1 blas_env "$SGEMM" 2048 7 >>"$OUT"; last_sgemm=$1; }
dnnl() { OMP_NUM_THREADS=$2 "$DNNL" "$1" 2048 7 >>"$OUT"; }
# own_roofline OWN THREADS: OWN is an OpenBLAS core or "dnnl-bf16".
own_roofline() {
    if [ "$1" = dnnl-bf16 ]; then
        dnnl bf16 "$2"
    else
        OPENBLAS_NUM_THREADS=$2 OPENBLAS_CORETYPE=$1 env -u OPENBLAS_L2_SIZE "$SGEMM" 2048 7 >>"$OUT"
    fi
    last_own="$1 $2"
}
# The rooflines side by side at 1 and T threads, once a round: sgemm,
# oneDNN's float32 matmul (a cross-check of sgemm's kernels: make_table.py
# warns when sgemm falls below 0.8 of it) and its bf16 matmul (the matrix
# engines' roofline).
rooflines() {
    for t in $ROOF_THREADS; do
        sgemm "$t"
        for m in $DNNL_MODES; do dnnl "$m" "$t"; done
    done
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
# row OWN COMMAND...: OWN is the row's own roofline (own_roofline), or empty.
row() {
    own=$1; shift
    t=$(threads_of "$@")
    [ "$last_sgemm" = "$t" ] || sgemm "$t"
    [ -z "$own" ] || [ "$last_own" = "$own $t" ] || own_roofline "$own" "$t"
    printf '{"what":"load","loadavg":%s}\n' "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT"
    "$@" >>"$OUT" || note "failed (exit $?): $*"
    last_own=
    [ -z "$own" ] || own_roofline "$own" "$t"
    sgemm "$t"
}
attn() {
    isa=$1; shift
    note "ATTN_ARCH=$isa attn bench $*"
    row "$(same_core_of "$isa")" env ATTN_ARCH="$isa" "$ATTN_BIN" bench --json $(runs_of "$@") "$@"
}
# attn's bf16 products (--precision bf16, on the engine attn picks), rated
# against oneDNN's bf16 matmul; only where attn bench has the option.
HAVE_BF16=0
"$ATTN_BIN" bench --help 2>&1 | grep -q -- '--precision' && HAVE_BF16=1
BF16_OWN=
case " $DNNL_MODES " in *" bf16 "*) BF16_OWN=dnnl-bf16 ;; esac
attn_bf16() {
    [ "$HAVE_BF16" = 1 ] || return 0
    note "attn bench --precision bf16 $*"
    row "$BF16_OWN" "$ATTN_BIN" bench --json --precision bf16 $(runs_of "$@") "$@"
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

SMALL="--batch 8 --heads 8 --seq 128"    # B·H = 64
one_round() {
    rooflines
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
    attn_bf16 $SMALL --threads $T
    for n in 512 1024 2048 4096 8192; do attn_bf16 --seq $n --threads $T; done
    attn_bf16 --seq 2048 --head-dim 128 --threads $T
    attn_bf16 --seq 2048 --causal --threads $T
    for n in 1024 2048 4096; do attn_bf16 --seq $n --mode backward --threads $T; done
    attn_bf16 --seq 2048 --threads 1
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
