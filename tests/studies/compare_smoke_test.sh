#!/usr/bin/env bash
# `psctl compare` end to end, short: two modes on the default job give one
# report row each, compare.json carries the figures, plots exist when gnuplot
# does (else the report says why); a run that fails (here: stopped by
# --timeout) is a failed row, not a crash; bad options are named; with root
# and iproute2, a run on shaped links in network namespaces that are gone
# afterwards.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # ROOT, TMP, psctl_compare, ...

# A mode's row of the main table (above the report's first section).
row() { sed -n '1,/^## /p' "$1/report.md" | grep "^| \`$2\` |"; }

# 1. Two modes: one row each, the JSON keys, the derived jobs, the plots.
out="$TMP/two"
psctl_compare 300 "$TMP/two.log" --config "$ROOT/configs/default.yaml" --modes sync,async:1 \
  --steps 30 --target-accuracy 0.5 --timeout 60 --out "$out"
if [[ $rc -eq 0 && -s "$out/report.md" && -s "$out/compare.json" ]]; then
  # The main table (above the first section), then the two efficiencies'.
  rows=$(sed -n '1,/^## /p' "$out/report.md" | grep -c '^| `')
  [[ $rows -eq 2 ]] || fail "report.md has $rows mode rows, want 2"
  rows=$(sed -n '/^## Two efficiencies/,/^## Definitions/p' "$out/report.md" | grep -c '^| `')
  [[ $rows -eq 2 ]] || fail "report.md's two efficiencies have $rows mode rows, want 2"
  grep -q '^| mode | s / step | steady s / step | ms / sample | steps to target | samples to target |' "$out/report.md" ||
    fail "report.md lacks the two efficiencies' header"
  for m in sync async:1; do
    row "$out" "$m" | grep -q '| 1/1 |' || fail "no successful row for $m: $(row "$out" "$m")"
  done
  grep -q '^| mode | runs ok | time to target (s) | steps to target |' "$out/report.md" ||
    fail "report.md lacks the table header"
  grep -q 'barrier wait share' "$out/report.md" || fail "report.md lacks the barrier share"
  grep -q 'links: loopback, not shaped' "$out/report.md" || fail "report.md lacks the emulation line"
  for key in mode runs_ok time_to_target_s steps_to_target final_loss final_accuracy \
      samples_per_s bytes_sent_per_worker_step bytes_received_per_worker_step \
      staleness_p50 staleness_p99 staleness_max barrier_wait_share comm_s_per_step steady_s_per_step \
      repeats emulation target plots; do
    grep -q "\"$key\":" "$out/compare.json" || fail "compare.json lacks $key"
  done
  grep -q '"mode": "async:1"' "$out/compare.json" || fail "compare.json lacks mode async:1"
  for m in sync async-1; do
    [[ -s "$out/runs/$m/metrics.csv" && -s "$out/runs/$m/summary.json" ]] ||
      fail "runs/$m lacks metrics.csv or summary.json"
    grep -q 'every_steps: 5' "$out/runs/$m/derived.yaml" || fail "runs/$m: evaluation not every 5 steps"
  done
  grep -q 'staleness: 1' "$out/runs/async-1/derived.yaml" || fail "async:1 does not run staleness 1"
  if command -v gnuplot >/dev/null; then
    for p in loss_vs_time loss_vs_step accuracy_vs_time staleness_async_1; do
      [[ -s "$out/plots/$p.png" && -s "$out/plots/$p.svg" ]] || fail "plot $p missing"
      grep -q "(plots/$p.png)" "$out/report.md" || fail "report.md does not link $p"
    done
  else
    grep -q 'Skipped: gnuplot is not installed' "$out/report.md" || fail "no reason for missing plots"
    # user-facing message check: psctl says why there are no plots.
    grep -q 'plots skipped' "$TMP/two.log" || fail "psctl did not print why plots are skipped"
    echo "note: gnuplot missing, plots skipped (reason checked)"
  fi
  ok "compare sync,async:1: $(row "$out" sync | cut -d'|' -f2-5)"
else
  cat "$TMP/two.log"; fail "compare sync,async:1: rc $rc"
fi

# 2. A failing run is a failed row with its reason; the others still run.
out="$TMP/failing"
psctl_compare 120 "$TMP/failing.log" --config "$ROOT/configs/default.yaml" --modes async:1,sync \
  --steps 1000000 --timeout 2 --out "$out"
if [[ $rc -eq 1 ]] && row "$out" async:1 | grep -q '0/1 FAILED' &&
    row "$out" sync | grep -q '0/1 FAILED' && grep -q 'timed out after 2 s' "$out/report.md" &&
    grep -q '"failed": true' "$out/compare.json"; then
  ok "runs stopped by --timeout are failed rows"
else
  cat "$TMP/failing.log"; fail "failing runs: rc $rc"
fi
if pgrep -f -- "--out=$out/" >/dev/null; then fail "processes of stopped runs are left"; fi

# 3. Bad options are named and nothing runs.
check_bad() {  # expected-text args...
  local want="$1"
  shift
  psctl_compare 60 "$TMP/bad.log" --out "$TMP/bad" "$@"
  # user-facing message check: the error names the bad option.
  if [[ $rc -eq 2 ]] && grep -q -- "$want" "$TMP/bad.log"; then ok "bad option named: $want"; else
    cat "$TMP/bad.log"; fail "bad option $*: rc $rc"; fi
}
check_bad "unknown mode 'bogus'" --modes sync,bogus
check_bad "--straggler" --straggler 1
check_bad "worker.straggler_rank" --straggler 5:2 --workers 2
check_bad "given twice" --modes sync,sync
check_bad "--transient: expected P:FACTOR" --transient 0.1
check_bad "worker.transient_straggler_p: must be in \[0, 1\]" --transient 1.5:2
check_bad "--pause: expected RANK:STEP:SECONDS" --pause 1:2
check_bad "worker.pause_at_step: must be in \[0, training.steps" --pause 1:500:1 --steps 200
check_bad "--set: expected KEY=VALUE" --set training.async_lr_per_push
check_bad "training.async_lr_per_push: 'scaled' applies to mode async only" \
  --modes sync --set training.async_lr_per_push=scaled
check_bad "unknown mode 'backup:0'" --modes backup:0
[[ ! -d "$TMP/bad/runs/sync/logs" ]] || fail "a run started despite bad options"

# 4. Shaped links: every process in its own namespace, 10.213.0.0/24
#    addresses, namespaces gone afterwards.
if why="$("$ROOT/deploy/netshape.sh" check 2>&1)"; then
  out="$TMP/shaped"
  psctl_compare 180 "$TMP/shaped.log" --config "$ROOT/configs/default.yaml" --modes async:1 \
    --steps 20 --shape-gbit 1 --timeout 60 --out "$out"
  id="$(sed -n 's/.*namespaces psnet-\(r[0-9]*\)-\*.*/\1/p' "$out/runs/async-1/psctl.log" | head -1)"
  # Log check: no file records the address a process listened on or
  # registered at.
  if [[ $rc -eq 0 ]] && row "$out" async:1 | grep -q '| 1/1 |' &&
      grep -q 'listening on 10\.213\.0\.' "$out/runs/async-1/logs/coordinator.log" &&
      grep -q 'registered at 10\.213\.0\.' "$out/runs/async-1/logs/coordinator.log" &&
      grep -q 'shaped to 1 Gbit/s' "$out/report.md" && [[ -n "$id" ]]; then
    if ip netns list | grep -q "psnet-$id-"; then fail "namespaces psnet-$id-* left"; else
      ok "shaped run in namespaces psnet-$id-* (removed afterwards)"; fi
  else
    cat "$TMP/shaped.log" "$out/runs/async-1/psctl.log"; fail "shaped compare: rc $rc"
  fi
else
  echo "SKIP shaped links: $why"
fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
