#!/usr/bin/env bash
# `psctl study scaling --smoke` end to end: N = 1, 2 workers x (the parameter
# server with K = 1, 2 servers, ring all-reduce) run through psctl compare
# with the study's derived jobs (fixed local batch, emulated compute, the
# worker and server counts); on shaped links when this machine can make
# them (root, iproute2), else on loopback, and the report says which. The
# report has a row with measured numbers per design and N beside the
# analytic model's bytes per link, the bytes the runs really sent match the
# model's M, a plot, and a verdict with its numbers for every claim. Bad
# options are refused by name before anything runs.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # ROOT, PSCTL, REPORT, TMP, ...

out="$TMP/study"
run_logged 900 "$TMP/study.log" "$PSCTL" study scaling --smoke --bin "$ROOT" --out "$out"
if ((rc != 0)) || [[ ! -s "$out/report.md" || ! -s "$out/study.json" ]]; then
  cat "$TMP/study.log"
  for f in "$out"/*.log; do [[ -f "$f" ]] && { echo "== $f"; tail -n 20 "$f"; }; done
  fail "psctl study scaling --smoke: rc $rc, report.md or study.json missing"
  procs_finish "" "(study did not run)"
fi
ok "psctl study scaling --smoke ran"
md="$out/report.md"

# Which transport limits were in force, as the machine allows.
if why="$("$ROOT/deploy/netshape.sh" check 2>&1)"; then
  grep -q '^\*\*Transport limits in force:\*\* every process.s link shaped to 0.2 Gbit/s' "$md" ||
    fail "shaping is available but the report does not say the links were shaped"
  grep -q 'shaped to 0.2 Gbit/s' "$out/N2-K1/r1/report.md" || fail "the compare runs were not shaped"
  ok "shaped links, and the report says so"
  # Every run in the namespaces the study made once, none left behind.
  # user-facing message check: psctl run names the namespaces it ran in.
  net="$(sed -n 's/.*(namespaces \(psnet-s[0-9]*-\)\*, .*made beforehand).*/\1/p' \
    "$out/N2-K2/r1/runs/sync/psctl.log")"
  [[ -n "$net" ]] || fail "the runs did not use the study's namespaces: $(head -1 "$out/N2-K2/r1/runs/sync/psctl.log")"
  for d in N1-K1/r1/runs/allreduce N2-K1/r1/runs/sync; do
    grep -q "(namespaces $net\*" "$out/$d/psctl.log" || fail "$d ran in other namespaces than $net*"
  done
  ! ls /run/netns 2>/dev/null | grep -q "^$net" || fail "the study left namespaces $net* behind"
  ok "one set of namespaces for every run (${net}*), removed at the end"
else
  grep -q "^\*\*Transport limits in force:\*\* loopback, not shaped" "$md" ||
    fail "shaping is unavailable ($why) but the report does not say loopback"
  ok "loopback (shaping unavailable: $why), and the report says so"
fi

# One row per design and N: every run ok, a measured s / step, and the
# analytic bytes per link (M = 534544 bytes): ps:1 at N = 2 puts 2 M on the
# server's link, ps:2 at N = 2 one M per server; the ring 2 (N - 1) / N M.
row() { grep "^| \`$1\` | $2 | 1/1 | " "$md"; }
for cell in "ps:1 1" "ps:1 2" "ps:2 1" "ps:2 2" "allreduce 1" "allreduce 2"; do
  set -- $cell
  r="$(row "$1" "$2")" || { fail "no successful row for $1 at N = $2"; continue; }
  [[ "$(cut -d'|' -f5 <<<"$r")" =~ ^\ [0-9]+\.[0-9]{4}\ $ ]] || fail "$1 N = $2: s / step is not a number: $r"
  [[ "$(cut -d'|' -f8 <<<"$r")" =~ ^\ [0-9]+\.[0-9]{2}\ $ ]] || fail "$1 N = $2: no efficiency: $r"
done
[[ "$(row ps:1 2 | cut -d'|' -f9)" == " 1.07 " ]] || fail "ps:1 N = 2: server link bytes: $(row ps:1 2)"
[[ "$(row ps:2 2 | cut -d'|' -f9)" == " 0.535 " ]] || fail "ps:2 N = 2: server link bytes: $(row ps:2 2)"
[[ "$(row allreduce 2 | cut -d'|' -f10)" == " 0.535 " ]] || fail "allreduce N = 2: worker link bytes: $(row allreduce 2)"
[[ "$(row allreduce 1 | cut -d'|' -f10)" == " 0 " ]] || fail "allreduce N = 1 sends nothing: $(row allreduce 1)"
ok "a row per design and N, with the model's bytes per link"

# The model's M is what a PS worker really pushed per step (summary.json
# bytes_pushed / (N x steps), framing included: within 5%), and the ring at
# N = 2 sent 2 (N - 1) / N x M = M per worker per step.
for cell in "ps:1 1" "ps:2 2" "allreduce 2"; do
  set -- $cell
  sent="$(row "$1" "$2" | cut -d'|' -f11)"
  awk -v s="$sent" 'BEGIN { exit !(s >= 0.534 && s <= 0.535 * 1.05) }' ||
    fail "$1 N = $2: measured MB sent per worker per step '$sent', want M = 0.535 (+5%)"
done
ok "the runs sent the model's bytes"

# The study's jobs: fixed local batch, its compute, its N and K.
d="$out/N2-K2/r1/runs/sync/derived.yaml"
for want in 'workers: 2' 'servers: 2' 'local_batch: 32' 'compute_ms: 20' 'mode: sync'; do
  grep -q "^ *$want\$" "$d" || fail "$d lacks '$want'"
done
grep -q '^ *mode: allreduce$' "$out/N2-K1/r1/runs/allreduce/derived.yaml" || fail "no allreduce run at N = 2"
grep -q '^ *workers: 1$' "$out/N1-K1/r1/runs/sync/derived.yaml" || fail "N = 1 does not run 1 worker"
ok "derived jobs: N, K, local batch 32, compute 20 ms"

# A verdict with its numbers and rule for each claim, decided by ps_report.
n=$(grep -cE '^- \*\*(supported|not supported)\*\* — ' "$md")
((n == 3)) || fail "report.md has $n verdicts, want 3"
for id in ps1-falls-ring-stays servers-move-saturation model-explains-time; do
  grep -q "\"id\": \"$id\"" "$out/study.json" || fail "study.json lacks claim $id"
done
grep -E '^- \*\*(supported|not supported)\*\* — ' "$md" | grep -qv 'Rule:' &&
  fail "a verdict without its rule: $(grep -E '^- \*\*' "$md" | grep -v 'Rule:' | head -1)"
# Whether ps:1 saturates inside the smoke grid (N = 2) depends on the
# machine's load: either form quotes the measured point.
grep -qE 'measured saturation point: `ps:1` (beyond )?N = 2' "$md" ||
  fail "the saturation verdict quotes no numbers: $(grep -m1 'saturation point' "$md")"
grep -q '^In short: at N = 2 the scaling efficiency is `ps:1` [0-9]' "$md" || fail "no generated summary"
grep -q '^./psctl study scaling --smoke$' "$md" || fail "report.md lacks the command that regenerates it"
ok "a verdict with numbers for each of the 3 claims"

# The plot: the text plot always, gnuplot's image when it is installed.
grep -q '^scaling efficiency (median)$' "$md" || fail "no text plot"
grep -q '^1 1.0000 1.0000 1.0000$' "$out/plots/efficiency.dat" || fail "efficiency.dat: $(cat "$out/plots/efficiency.dat")"
if command -v gnuplot >/dev/null; then
  [[ -s "$out/plots/efficiency.png" && -s "$out/plots/efficiency.svg" ]] || fail "gnuplot drew no efficiency plot"
  grep -q 'plots/efficiency.png' "$md" || fail "report.md does not show the plot"
else
  grep -q 'gnuplot is not installed' "$md" || fail "report.md does not say why there is no image"
fi
ok "plots"

# Bad options are named; nothing runs.
rc=0
"$PSCTL" study scaling --repeats 0 --bin "$ROOT" --out "$TMP/bad" >"$TMP/bad.log" 2>&1 || rc=$?
# user-facing message check: the error names the option.
if ((rc == 2)) && grep -q -- "--repeats: expected a positive integer, got '0'" "$TMP/bad.log" &&
  [[ ! -e "$TMP/bad/N1-K1" ]]; then
  ok "--repeats 0 refused"
else
  cat "$TMP/bad.log"; fail "psctl study scaling --repeats 0: rc $rc"
fi

procs_finish "$passed passed" "($passed passed)"
