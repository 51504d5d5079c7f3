#!/usr/bin/env bash
# Ring attention benchmarks: speed of 2 ranks x 1 thread against
# one process x 1 thread (and against two independent processes at once,
# the most two cores give here), communication wait, peak memory per rank,
# and the P = 1..4 runs the scaling model (scripts/ring_model.py,
# docs/SCALING.md) is checked against. Appends one JSON object per measurement to $OUT, then
# prints the summary and the model's tables.
#
#   bench/ring.sh                 everything (long: N = 65536 runs for memory)
#   PARTS="speed check" bench/ring.sh   a subset: speed, memory, check
#
# Variables: ATTN (the attn binary), OUT (results file), N (speed runs,
# 16384), NMEM (memory runs, 65536), NCHK (model check, 8192), RUNS (3),
# REPS (speed: rounds of the interleaved runs, 3; the summary takes medians),
# IDLE (a percentage: before each run, wait until the machine's cores were
# idle that much of 3 seconds, for shared machines; 0 = do not wait).
# The machine's other load matters: every result carries the load average
# and the CPU seconds of all ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
ATTN=${ATTN:-build/attn}
OUT=${OUT:-bench/ring-results.jsonl}
N=${N:-16384}
NMEM=${NMEM:-65536}
NCHK=${NCHK:-8192}
RUNS=${RUNS:-3}
REPS=${REPS:-3}
IDLE=${IDLE:-0}
PARTS=${PARTS:-speed memory check}
# OpenMPI: allowed as root (CI, containers), more ranks than cores for the
# P = 3, 4 check; idle OpenMP workers sleep.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
# Percentage of the cores' time spent idle over 3 seconds (/proc/stat).
idle() {
  local a b
  read -ra a </proc/stat
  sleep 3
  read -ra b </proc/stat
  local busy=0 all=0 i
  for i in 1 2 3 4 5 6 7 8; do
    all=$((all + b[i] - a[i]))
    [ "$i" = 4 ] || [ "$i" = 5 ] || busy=$((busy + b[i] - a[i]))
  done
  echo $((100 - 100 * busy / (all > 0 ? all : 1)))
}
run() {
  if [ "$IDLE" -gt 0 ]; then
    local x
    while x=$(idle) && [ "$x" -lt "$IDLE" ]; do echo "  (machine ${x}% idle, waiting)" >&2; sleep 20; done
  fi
  echo "+ $* ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$@" --json >>"$OUT"
}
for part in $PARTS; do
  case $part in
  speed)
    # interleaved, so a change in the machine's load hits all three alike
    for _ in $(seq "$REPS"); do
      for mode in forward backward; do
        run mpirun -np 1 "$ATTN" ring bench --seq "$N" --causal --single --mode $mode --runs "$RUNS"
        run mpirun -np 2 "$ATTN" ring bench --seq "$N" --causal --single --mode $mode --runs "$RUNS"
        run mpirun -np 2 "$ATTN" ring bench --seq "$N" --causal --mode $mode --runs "$RUNS"
      done
    done ;;
  memory)
    # one process per mode, so each peak is that mode's alone
    for mode in forward backward; do
      run mpirun -np 1 "$ATTN" ring bench --seq "$NMEM" --causal --single --mode $mode --runs 1
      run mpirun -np 2 "$ATTN" ring bench --seq "$NMEM" --causal --mode $mode --runs 1
    done ;;
  check)
    for p in 1 2 3 4; do
      run mpirun --oversubscribe -np $p "$ATTN" ring bench --seq "$NCHK" --causal --runs 1
    done ;;
  *) echo "bench/ring.sh: unknown part '$part' (speed, memory, check)" >&2; exit 2 ;;
  esac
done
python3 scripts/ring_model.py "$OUT" "$N"  # the model's inputs: the speed runs
