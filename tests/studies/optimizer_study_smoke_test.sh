#!/usr/bin/env bash
# `psctl study optimizers --smoke` end to end: every optimizer (sgd,
# momentum, adam) x staleness (async:0, async:inf) runs through psctl
# compare with training.optimizer and the staleness bound in its derived
# jobs; the study report has the steps-to-target table per optimizer and s,
# the text plot, and a verdict (supported / not supported / inconclusive)
# with its numbers and rule for momentum and for Adam; study.json agrees.
# Bad input (an unknown study, a non-async mode given to ps_report) is refused.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # ROOT, PSCTL, REPORT, TMP, ...

out="$TMP/study"
run_logged 600 "$TMP/study.log" "$PSCTL" study optimizers --smoke --bin "$ROOT" --out "$out"
if ((rc != 0)) || [[ ! -s "$out/report.md" || ! -s "$out/study.json" ]]; then
  cat "$TMP/study.log"
  for f in "$out"/*.log; do [[ -f "$f" ]] && { echo "== $f"; tail -n 20 "$f"; }; done
  fail "psctl study optimizers --smoke: rc $rc, report.md or study.json missing"
  procs_finish "" "(study did not run)"
fi
ok "psctl study optimizers --smoke ran"
md="$out/report.md"

# The derived jobs: the optimizer and the staleness bound of each row.
for opt in sgd momentum adam; do
  for s in 0 inf; do
    d="$out/$opt/r1/runs/async-$s/derived.yaml"
    grep -q "optimizer: $opt" "$d" || fail "$opt/async:$s: derived job does not train $opt"
    grep -q "staleness: $s" "$d" || fail "$opt/async:$s: derived job has no staleness $s"
    grep -q "mode: async" "$d" || fail "$opt/async:$s: derived job is not mode async"
  done
done
ok "derived jobs: optimizer x staleness"

# Steps to target per optimizer and s: a number or an honest "not reached".
grep -q '^| optimizer | s = 0 | s = inf |$' "$md" || fail "report.md lacks the steps-to-target table"
for opt in sgd momentum adam; do
  row="$(grep "^| \`$opt\` | [0-9n]" "$md" | head -1)"
  [[ "$row" =~ ^\|\ \`$opt\`\ \|\ ([0-9]+|not\ reached)\ \|\ ([0-9]+|not\ reached)\ \|$ ]] ||
    fail "$opt: steps-to-target row malformed: '$row'"
  for s in 0 inf; do
    grep -q "^| \`$opt\` | \`async:$s\` | 1/1 | [01]/1 |" "$md" ||
      fail "$opt/async:$s: no successful run in the table"
  done
done
ok "steps to target for every optimizer and s"

# The plot and the verdicts.
# gnuplot installed: the PNG, linked; else the text plot and why no image.
if command -v gnuplot >/dev/null 2>&1; then
  [[ -s "$out/plots/optimizers_steps_vs_staleness.png" ]] &&
    grep -q '](plots/optimizers_steps_vs_staleness.png)' "$md" ||
    fail "gnuplot is installed but report.md does not show plots/optimizers_steps_vs_staleness.png"
else
  grep -q '^No gnuplot plots: gnuplot is not installed' "$md" &&
    grep -q '^median steps to target$' "$md" && grep -q 'S sgd, M momentum, A adam' "$md" ||
    fail "report.md lacks the text plot or why there is no image"
fi
n=$(grep -cE '^- \*\*(supported|not supported|inconclusive)\*\* — Dai et al. 2019: ' "$md")
((n == 2)) || fail "report.md has $n verdicts, want 2"
for opt in momentum adam; do
  grep -q "\"id\": \"dai-$opt\"" "$out/study.json" || fail "study.json lacks claim dai-$opt"
done
grep -E '^- \*\*' "$md" | grep -v 'Rule:' | grep -q . && fail "a verdict without its rule"
grep -E '^- \*\*' "$md" | grep -qv 'median steps to target\|no baseline' &&
  fail "a verdict without the numbers it rests on"
# One s > 0 in the smoke grid: the code must say it cannot judge.
grep -q '"verdict": "inconclusive"' "$out/study.json" ||
  fail "the smoke grid (one s > 0) gave a verdict other than inconclusive"
grep -q '^./psctl study optimizers --smoke$' "$md" || fail "report.md lacks the command that regenerates it"
ok "plot, and a verdict with numbers and rule for momentum and Adam"

# Bad input is named, nothing runs.
rc=0
"$PSCTL" study nosuch --bin "$ROOT" >"$TMP/bad.log" 2>&1 || rc=$?
# user-facing message check: the error names the unknown study.
if ((rc == 2)) && grep -q "unknown study 'nosuch'" "$TMP/bad.log"; then
  ok "unknown study refused"
else
  cat "$TMP/bad.log"; fail "psctl study nosuch: rc $rc"
fi
rc=0
"$REPORT" study-optimizers --out "$TMP" --optimizer "sgd=$out/../nowhere" >"$TMP/bad2.log" 2>&1 || rc=$?
# user-facing message check: the error names the missing file.
if ((rc == 2)) && grep -q "nowhere/compare.json" "$TMP/bad2.log"; then
  ok "missing compare.json refused"
else
  cat "$TMP/bad2.log"; fail "ps_report study-optimizers with a missing dir: rc $rc"
fi

procs_finish "$passed passed" "($passed passed)"
