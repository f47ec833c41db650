#!/usr/bin/env bash
# `psctl study sparse --smoke` end to end: the wide-and-deep job at two
# table sizes x the modes sync (PS), allreduce:allgather, allreduce:dense
# and ddp (PyTorch DDP on the same model, where /usr/bin/python3 has torch)
# through psctl compare; the study report has bytes and steady s / step for
# every size and mode, a verdict with numbers and rule for each claim, and
# plots (gnuplot PNGs, or the reason there are none). Byte counts are exact,
# so they are checked against the exchange's arithmetic; times are not
# bounded. Bad input to ps_report study-sparse is refused by name.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # ROOT, PSCTL, REPORT, TMP, ...

out="$TMP/study"
have_torch=0
/usr/bin/python3 -c 'import torch.distributed' >/dev/null 2>&1 && have_torch=1
((have_torch)) || echo "SKIP (ddp row only): /usr/bin/python3 cannot import torch (python3-torch); the study leaves ddp out and says so"
run_logged 900 "$TMP/study.log" "$PSCTL" study sparse --smoke --bin "$ROOT" --out "$out"
if ((rc != 0)) || [[ ! -s "$out/report.md" || ! -s "$out/study.json" ]]; then
  cat "$TMP/study.log"
  for f in "$out"/*.log; do [[ -f "$f" ]] && { echo "== $f"; tail -n 20 "$f"; }; done
  fail "psctl study sparse --smoke: rc $rc, report.md or study.json missing"
  procs_finish "" "(study did not run)"
fi
ok "psctl study sparse --smoke ran"
md="$out/report.md"

# Every table size x mode ran, with the table size and exchange it asked for.
for rows in 1000 100000; do
  for m in sync allreduce:allgather allreduce:dense; do
    dir="$out/rows-$rows/r1/runs/${m//:/-}"
    grep -q "buckets: $rows\$" "$dir/derived.yaml" || fail "$rows/$m: the job's table is not $rows rows"
  done
  grep -q 'sparse: dense' "$out/rows-$rows/r1/runs/allreduce-dense/derived.yaml" ||
    fail "$rows: allreduce:dense does not set allreduce.sparse dense"
  grep -q 'sparse: allgather' "$out/rows-$rows/r1/runs/allreduce-allgather/derived.yaml" ||
    fail "$rows: allreduce:allgather does not set allreduce.sparse allgather"
done
ok "derived jobs: two table sizes x three exchanges"

# The table: one successful row per size and mode, bytes and steady s / step.
declare -A sent
for r in "10^3 1000" "10^5 100000"; do
  read -r label rows <<<"$r"
  for m in sync allreduce:allgather allreduce:dense; do
    row="$(grep "^| $label | \`$m\` | 1/1 |" "$md")" || { fail "no successful row $label $m"; continue; }
    s="$(cut -d'|' -f5 <<<"$row" | awk '{ v = $1; u = $2; f = u == "GB" ? 1e9 : u == "MB" ? 1e6 : u == "kB" ? 1e3 : 1; printf "%.0f", v * f }')"
    sent[$rows/$m]="$s"
    [[ "$(cut -d'|' -f7 <<<"$row")" =~ ^\ [0-9]+\.[0-9]{4}\ s\ $ ]] ||
      fail "$label/$m: steady s / step is not a number: $row"
  done
done
ok "bytes and steady s / step for every size and mode"

# Exact arithmetic of the dense exchange (2 workers: 2(N-1)/N = 1 x the
# fp32 gradient): at 10^5 rows x 16 it sends at least 4 x 1.6 M bytes per
# step; the PS and the all-gather move only touched rows (32 x 4 per
# worker), far less, at both sizes.
awk -v d="${sent[100000/allreduce:dense]:-0}" 'BEGIN { exit !(d >= 6400000) }' ||
  fail "dense at 10^5 rows sent ${sent[100000/allreduce:dense]:-?} B per step, want >= 6.4 MB"
for m in sync allreduce:allgather; do
  awk -v p="${sent[100000/$m]:-0}" -v q="${sent[1000/$m]:-0}" 'BEGIN { exit !(p > 0 && p < 1000000 && q > 0 && q < 1000000) }' ||
    fail "$m sent ${sent[1000/$m]:-?} / ${sent[100000/$m]:-?} B per step at 10^3 / 10^5 rows, want < 1 MB"
done
ok "bytes: dense ${sent[100000/allreduce:dense]:-?} B at 10^5 rows, PS ${sent[100000/sync]:-?} B"

# PyTorch DDP: a successful row at both sizes, its bytes marked computed and
# within 1.25x of the dense ring's (2 workers: 1 x the fp32 model each way),
# a steady s / step; or, without torch, the setup says it was not run.
if ((have_torch)); then
  for r in "10^3 1000" "10^5 100000"; do
    read -r label rows <<<"$r"
    row="$(grep "^| $label | \`ddp\` | 1/1 |" "$md")" || { fail "no successful ddp row at $label"; continue; }
    [[ "$(cut -d'|' -f5 <<<"$row")" == *"(computed)"* ]] || fail "$label/ddp: bytes not marked computed: $row"
    d="$(cut -d'|' -f5 <<<"$row" | awk '{ v = $1; u = $2; f = u == "GB" ? 1e9 : u == "MB" ? 1e6 : u == "kB" ? 1e3 : 1; printf "%.0f", v * f }')"
    awk -v d="$d" -v r="${sent[$rows/allreduce:dense]:-0}" 'BEGIN { exit !(r > 0 && d >= r / 1.25 && d <= r * 1.25) }' ||
      fail "$label/ddp sent $d B per step, dense ${sent[$rows/allreduce:dense]:-?} B: not within 1.25x"
    [[ "$(cut -d'|' -f7 <<<"$row")" =~ ^\ [0-9]+\.[0-9]{4}\ s\ $ ]] ||
      fail "$label/ddp: steady s / step is not a number: $row"
  done
  ok "ddp rows at 10^3 and 10^5 with computed bytes near the dense ring's"
else
  grep -q 'ddp \*\*not run\*\*: /usr/bin/python3 cannot import torch' "$md" ||
    fail "without torch the report does not say ddp was not run"
  ok "no torch here: the report says ddp was not run"
fi

# A verdict with its numbers and rule for each claim, decided by ps_report.
n=$(grep -cE '^- \*\*(supported|not supported)\*\* — ' "$md")
((n == 8)) || fail "report.md has $n verdicts, want 8"
for id in ps-bytes-flat dense-bytes-linear allgather-bytes-near-ps ps-time-flat dense-time-grows \
  allgather-time-near-ps ddp-bytes-like-dense ddp-time-grows; do
  grep -q "\"id\": \"$id\"" "$out/study.json" || fail "study.json lacks claim $id"
done
grep -E '^- \*\*(supported|not supported)\*\* — ' "$md" | grep -v 'median .*Rule: ' |
  grep -q . && fail "a verdict without the numbers and rule it rests on"
grep -q '^./psctl study sparse --smoke$' "$md" || fail "report.md lacks the command that regenerates it"
ok "a verdict with numbers and rule for each of the 8 claims"

# Plots: gnuplot PNGs when gnuplot is installed, else the reason in the report.
if command -v gnuplot >/dev/null 2>&1; then
  for p in sparse_bytes sparse_time; do
    [[ -s "$out/plots/$p.png" ]] || fail "gnuplot is installed but plots/$p.png is missing"
    grep -q "](plots/$p.png)" "$md" || fail "report.md does not show plots/$p.png"
  done
  ok "gnuplot plots drawn and linked"
else
  grep -q '^No gnuplot plots: gnuplot is not installed' "$md" || fail "report.md does not say why there are no plots"
  ok "no gnuplot here: the report says so"
fi
grep -q 'set logscale x' "$out/plots/study.gp" || fail "plots/study.gp is not log-log"

# Bad input is named, nothing is written.
rc=0
"$REPORT" study-sparse --out "$TMP/bad" --table "ten=$out/rows-1000/r1" >"$TMP/bad.log" 2>&1 || rc=$?
# user-facing message check: the error names the option and the form.
if ((rc == 2)) && grep -q -- "--table ten=.*expected ROWS=COMPARE_DIR" "$TMP/bad.log" && [[ ! -e "$TMP/bad" ]]; then
  ok "a bad --table is refused"
else
  cat "$TMP/bad.log"; fail "ps_report study-sparse --table ten=...: rc $rc"
fi
rc=0
"$REPORT" study-sparse --out "$TMP" --table "10=$TMP/nowhere" >"$TMP/bad2.log" 2>&1 || rc=$?
# user-facing message check: the error names the missing file.
if ((rc == 2)) && grep -q "$TMP/nowhere/compare.json" "$TMP/bad2.log"; then
  ok "a missing compare.json is named"
else
  cat "$TMP/bad2.log"; fail "ps_report study-sparse on a missing compare: rc $rc"
fi

procs_finish "$passed passed" "($passed passed)"
