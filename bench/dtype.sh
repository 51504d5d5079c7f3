#!/bin/sh
# float32 vs bfloat16 vs float16 storage, measured side by side: decode
# (attn bench --mode decode: KV-cache attention, Nq = 1, H = 32, Hkv = 8,
# D = 128, Nk = 32768) at 1 and 2 threads, and prefill forward / backward
# (N = 2048, H = 8, D = 64, 2 threads). Rounds interleave the dtypes so slow
# changes in the machine's state fall on all of them alike; each figure is
# the median over ROUNDS rounds of `attn bench`'s own median of RUNS runs.
#
#   bench/dtype.sh            (ATTN_BIN, ROUNDS (default 5), RUNS (default 5))
#
# Prints a markdown table (tokens/s and GB/s for decode, GFLOP/s for
# prefill) with each 16-bit figure's ratio to float32 measured in the same
# rounds, and the load average before and after.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ATTN=${ATTN_BIN:-$ROOT/build/attn}
ROUNDS=${ROUNDS:-5}
RUNS=${RUNS:-5}
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
r=0
while [ $r -lt "$ROUNDS" ]; do
    for dt in f32 bf16 f16; do
        for t in 1 2; do
            "$ATTN" bench --mode decode --dtype $dt --threads $t --runs "$RUNS" --json |
                sed "s/^/decode $dt $t /" >>"$TMP"
        done
        "$ATTN" bench --seq 2048 --dtype $dt --threads 2 --runs 3 --json | sed "s/^/forward $dt 2 /" >>"$TMP"
        "$ATTN" bench --mode backward --seq 2048 --dtype $dt --threads 2 --runs 3 --json |
            sed "s/^/backward $dt 2 /" >>"$TMP"
    done
    r=$((r + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$TMP" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, dt, t, js = line.split(" ", 3)
    d = json.loads(js)
    rows.setdefault((mode, dt, int(t)), []).append(d)
med = lambda xs: statistics.median(xs)
print("| measurement | float32 | bfloat16 | float16 | bf16 / f32 | f16 / f32 |")
print("|---|---|---|---|---|---|")
for mode, t, key, unit in (("decode", 1, "tokens_per_s", "tokens/s"), ("decode", 2, "tokens_per_s", "tokens/s"),
                           ("decode", 1, "kv_gbs", "GB/s K/V"), ("decode", 2, "kv_gbs", "GB/s K/V"),
                           ("decode", 1, "fraction", "of stream read"), ("decode", 2, "fraction", "of stream read"),
                           ("forward", 2, "gflops", "GFLOP/s"), ("backward", 2, "gflops", "GFLOP/s")):
    v = {dt: med([d[key] for d in rows[(mode, dt, t)]]) for dt in ("f32", "bf16", "f16")}
    print(f"| {mode} {t} thread{'s' if t > 1 else ''}, {unit} | {v['f32']:.3g} | {v['bf16']:.3g} | "
          f"{v['f16']:.3g} | {v['bf16'] / v['f32']:.2f} | {v['f16'] / v['f32']:.2f} |")
for dt in ("f32", "bf16", "f16"):
    one = med([d["tokens_per_s"] for d in rows[("decode", dt, 1)]])
    two = med([d["tokens_per_s"] for d in rows[("decode", dt, 2)]])
    print(f"decode {dt}: 2 threads / 1 thread = {two / one:.2f}")
EOF
