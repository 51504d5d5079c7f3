#!/bin/sh
# The variants' costs: attn bench --mode forward|backward at N=8192,
# H=8, D=64, B=1, 2 threads, for plain attention and each variant, in rounds
# that interleave the variants (slow changes in the machine's state fall on
# all of them alike). Prints a markdown table: each variant's median over the
# rounds and its ratio to plain (the window's also divided by its visible
# fraction), with the load average before and after.
#
#   bench/variants.sh         (ATTN_BIN, ROUNDS (default 3), RUNS (default 2), SEQ (8192))
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ATTN=${ATTN_BIN:-$ROOT/build/attn}
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-2}
SEQ=${SEQ:-8192}
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
r=0
while [ $r -lt "$ROUNDS" ]; do
    for mode in forward backward; do
        for v in plain "--softcap 30" --alibi --sinks "--dropout 0.1" "--window 256,0"; do
            opt=$v
            [ "$v" = plain ] && opt=
            # shellcheck disable=SC2086
            "$ATTN" bench --mode $mode --seq "$SEQ" --heads 8 --threads 2 --runs "$RUNS" $opt --json |
                sed "s#^#$mode|$v|#" >>"$TMP"
        done
    done
    r=$((r + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$TMP" <<'PY'
import json, re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, v, js = line.split("|", 2)
    rows.setdefault((mode, v), []).append(json.loads(js))
print("| mode | variant | rounds (ms) | median ms | ratio to plain |")
print("|---|---|---|---|---|")
for mode in ("forward", "backward"):
    base = statistics.median(d["ms"] for d in rows[(mode, "plain")])
    for v in ("plain", "--softcap 30", "--alibi", "--sinks", "--dropout 0.1", "--window 256,0"):
        ds = rows[(mode, v)]
        ms = [d["ms"] for d in ds]
        med = statistics.median(ms)
        ratio = f"{med / base:.2f}"
        m = re.search(r"visible=([0-9.]+)", ds[0].get("variant", ""))
        if m:
            vis = float(m.group(1))
            ratio += f" (visible {vis:.4f}; ÷ visible = {med / base / vis:.2f})"
        print(f"| {mode} | {v} | {', '.join(f'{x:.0f}' for x in ms)} | {med:.0f} | {ratio} |")
PY
