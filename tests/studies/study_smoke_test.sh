#!/usr/bin/env bash
# `psctl study stragglers --smoke` end to end: every scenario (persistent,
# transient, pause) x mode (sync, backup:1, async:2:scaled,
# async:inf:scaled, async:2) runs through psctl compare with the straggler
# models and modes in its derived jobs; the study report shows both
# efficiencies per scenario and a verdict ("supported" / "not supported")
# with its numbers for every claim; each compare report has its two
# efficiencies; the pause really happens (a lower bound on the wall time
# around its step, which load cannot break). Bad study names are refused.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # ROOT, PSCTL, REPORT, TMP, ...

out="$TMP/study"
run_logged 900 "$TMP/study.log" "$PSCTL" study stragglers --smoke --bin "$ROOT" --out "$out"
if ((rc != 0)) || [[ ! -s "$out/report.md" || ! -s "$out/study.json" ]]; then
  cat "$TMP/study.log"
  for f in "$out"/*.log; do [[ -f "$f" ]] && { echo "== $f"; tail -n 20 "$f"; }; done
  fail "psctl study stragglers --smoke: rc $rc, report.md or study.json missing"
  procs_finish "" "(study did not run)"
fi
ok "psctl study stragglers --smoke ran"
md="$out/report.md"

# Both efficiencies, per scenario and mode.
for scen in persistent transient pause; do
  grep -q "^## Scenario: $scen\$" "$md" || fail "report.md has no scenario $scen"
  for m in sync backup:1 async:2:scaled async:inf:scaled async:2; do
    row="$(sed -n "/^## Scenario: $scen\$/,/^## /p" "$md" | grep "^| \`$m\` | 1/1 |")" ||
      { fail "$scen: no successful row for $m"; continue; }
    # s / step and samples/s are numbers (hardware efficiency).
    [[ "$(cut -d'|' -f4 <<<"$row")" =~ ^\ [0-9]+\.[0-9]{4}\ $ ]] ||
      fail "$scen/$m: s / step is not a number: $row"
  done
done
grep -q '| s / step (hardware) | samples/s | steps to target (statistical) | time to target (s) |' "$md" ||
  fail "report.md lacks the two efficiencies' columns"
ok "both efficiencies for every scenario and mode"

# A verdict with its numbers for each claim, decided by ps_report.
n=$(grep -cE '^- \*\*(supported|not supported)\*\* — ' "$md")
((n == 5)) || fail "report.md has $n verdicts, want 5"
for id in ho-transient ho-persistent-bounded ho-persistent-unbounded chen-backup update-count; do
  grep -q "\"id\": \"$id\"" "$out/study.json" || fail "study.json lacks claim $id"
done
for src in "Ho et al. 2013" "Chen et al. 2016" "pstrain issue 28"; do
  grep -q "\*\* — $src: " "$md" || fail "no verdict for $src"
done
grep -E '^- \*\*(supported|not supported)\*\* — ' "$md" | grep -qv 'median' &&
  fail "a verdict without the numbers it rests on: $(grep -E '^- \*\*' "$md" | grep -v median | head -1)"
grep -q '"verdict": "\(supported\|not supported\)"' "$out/study.json" || fail "study.json has no verdicts"
grep -q '^./psctl study stragglers --smoke$' "$md" || fail "report.md lacks the command that regenerates it"
ok "a verdict with numbers for each of the 5 claims"

# Plots: gnuplot PNGs when gnuplot is installed, else the reason.
if command -v gnuplot >/dev/null 2>&1; then
  for p in stragglers_s_per_step stragglers_time_to_target; do
    [[ -s "$out/plots/$p.png" ]] && grep -q "](plots/$p.png)" "$md" ||
      fail "gnuplot is installed but report.md does not show plots/$p.png"
  done
else
  grep -q '^No gnuplot plots: gnuplot is not installed' "$md" || fail "report.md does not say why there are no plots"
fi
ok "plots, or why there are none"

# Each compare: both efficiencies and the decomposition against sync.
for scen in persistent transient pause; do
  c="$out/$scen/r1"
  grep -q '^## Two efficiencies' "$c/report.md" || fail "$scen: compare report lacks the two efficiencies"
  grep -q '| `async:2:scaled` | .* | lr / N (scaled), model clock |' "$c/report.md" ||
    fail "$scen: the report does not say async:2:scaled ran at lr / N on the model clock"
  grep -q 'async_lr_per_push: scaled' "$c/runs/async-2-scaled/derived.yaml" ||
    fail "$scen: async:2:scaled does not run async_lr_per_push scaled"
  grep -q 'backup_workers: 1' "$c/runs/backup-1/derived.yaml" || fail "$scen: backup:1 has no backup worker"
done
grep -q 'transient_straggler_p: 0.2' "$out/transient/r1/runs/sync/derived.yaml" ||
  fail "transient: the job has no transient stragglers"
grep -q 'straggler_rank: 1' "$out/persistent/r1/runs/sync/derived.yaml" ||
  fail "persistent: the job has no straggler"
ok "compare reports and derived jobs"

# The pause: rank 1 sleeps 0.2 s once, after its compute of step 5; in sync
# every worker waits for it, so steps 4 -> 6 take at least 0.2 s of wall
# time (a lower bound: load only adds).
wall() { paste -d, <("$REPORT" metrics-get "$1" step) <("$REPORT" metrics-get "$1" wall_s) |
  awk -F, -v s="$2" '$1 == s { w = $2 } END { print w }'; }
d="$out/pause/r1/runs/sync"
w4="$(wall "$d" 4)" w6="$(wall "$d" 6)"
if [[ -n "$w4" && -n "$w6" ]] && awk -v a="$w4" -v b="$w6" 'BEGIN { exit !(b - a >= 0.2) }'; then
  ok "pause: steps 4 -> 6 took $(awk -v a="$w4" -v b="$w6" 'BEGIN { print b - a }') s (>= 0.2)"
else
  fail "pause: steps 4 -> 6 took '$w4' -> '$w6' s, want >= 0.2 s apart"
fi

# Bad input is named, nothing runs.
rc=0
"$PSCTL" study nosuch --bin "$ROOT" >"$TMP/bad.log" 2>&1 || rc=$?
# user-facing message check: the error names the unknown study.
if ((rc == 2)) && grep -q "unknown study 'nosuch'" "$TMP/bad.log"; then
  ok "unknown study refused"
else
  cat "$TMP/bad.log"; fail "psctl study nosuch: rc $rc"
fi

procs_finish "$passed passed" "($passed passed)"
