#!/usr/bin/env bash
# Emulated compute and a straggler through `psctl compare` (worker.compute_ms,
# worker.straggler_rank/factor in the derived job). Lower bounds only:
#  - compute_ms C: every training row's compute_s (a mean over workers) >= C;
#  - straggler rank 1 of 2 at factor F: every row's compute_s >= C (1 + F) / 2,
#    and in sync mode the straggler's T - 1 steps after the first each take
#    at least F C after the previous step's last push, so the last training
#    row's wall_s >= (T - 1) F C.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # REPORT, TMP, psctl_compare, ...

STEPS=20
# metrics.csv is read through ps_report (common/run_record): COLUMN of every
# row, and "loss,COLUMN" pairs (the loss is empty on the final evaluation).
col() { "$REPORT" metrics-get "$1" "$2"; }
with_loss() { paste -d, <(col "$1" loss) <(col "$1" "$2"); }
# Training rows (those with a loss) whose compute_s is below $2.
rows_below() { with_loss "$1" compute_s | awk -F, -v min="$2" '$1 != "" && $2 + 1e-9 < min' | wc -l; }
last_wall() { with_loss "$1" wall_s | awk -F, '$1 != "" { w = $2 } END { print w }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }

run() {  # name extra-args...
  local name="$1"
  shift
  psctl_compare 120 "$TMP/$name.log" --config "$ROOT/configs/default.yaml" --modes sync \
    --workers 2 --steps "$STEPS" --timeout 25 --out "$TMP/$name" "$@"
}

# 1. compute_ms 20: no step computes faster.
if run compute --compute-ms 20; then
  csv="$TMP/compute/runs/sync/metrics.csv"
  n=$(rows_below "$csv" 0.02)
  rows=$(col "$csv" loss | grep -c .)
  wall=$(last_wall "$csv")
  if [[ $rows -eq $STEPS && $n -eq 0 ]] && ge "$wall" "$(awk -v t=$STEPS 'BEGIN { print (t - 1) * 0.02 }')"; then
    ok "compute_ms 20: $rows steps, compute_s >= 0.02 in each, last step at ${wall}s"
  else
    fail "compute_ms 20: $n of $rows rows below 0.02 s, last step at ${wall}s"
  fi
  # user-facing message checks: what the report tells its reader.
  grep -q 'emulated compute of 20 ms per step' "$TMP/compute/report.md" ||
    fail "report.md does not say compute was emulated"
  grep -q 'no straggler' "$TMP/compute/report.md" || fail "report.md does not say there is no straggler"
else
  cat "$TMP/compute.log"; fail "compute_ms run failed"
fi

# 2. Straggler rank 1 at factor 3 on top: its steps take at least 3 x 20 ms.
if run straggler --compute-ms 20 --straggler 1:3; then
  csv="$TMP/straggler/runs/sync/metrics.csv"
  n=$(rows_below "$csv" 0.04)  # (0.02 + 3 x 0.02) / 2 workers
  wall=$(last_wall "$csv")
  bound=$(awk -v t=$STEPS 'BEGIN { print (t - 1) * 3 * 0.02 }')
  if [[ $n -eq 0 ]] && ge "$wall" "$bound"; then
    ok "straggler 1:3: compute_s >= 0.04 in every row, last step at ${wall}s >= ${bound}s"
  else
    fail "straggler 1:3: $n rows below 0.04 s; last step at ${wall}s (want >= ${bound}s)"
  fi
  # user-facing message check: the report names the straggler.
  grep -q 'straggler: rank 1 computes 3× as long' "$TMP/straggler/report.md" ||
    fail "report.md does not name the straggler"
  grep -q 'straggler_rank: 1' "$TMP/straggler/runs/sync/job.yaml" ||
    fail "the effective job has no straggler"
else
  cat "$TMP/straggler.log"; fail "straggler run failed"
fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
