#!/bin/bash
# Issue 22: shell tests read results through ps_report, supervision.txt and
# exit statuses, not log wording. Every `grep` of a log (a *.log file or a
# logs/ folder) in tests/**/*.sh is therefore one of the two kinds
# docs/testing.md names, said by a comment in its paragraph (the lines up to
# the blank line above, at most 10): `# user-facing message check` (a message
# a user reads) or `# Log check` (an event no file records yet, and which).
# A log grep with neither fails this test, naming it.
#
# The source tree is found from the runfile of psctl (as
# no_grpc_internal_test does); tagged "external" so that Bazel never answers
# it from a cache while sources it does not declare have changed.
set -uo pipefail

src="$(dirname "$(readlink -f "$TEST_SRCDIR/pstrain/psctl")")"

# Prints FILE:LINE:TEXT for every unmarked log grep in the .sh files under
# $1/tests (tests/lint/, these checks themselves, aside); status 0 when there
# is none. Also sets total (all log greps).
unmarked() {
  local out
  out="$(find "$1/tests" -path "$1/tests/lint" -prune -o -name '*.sh' -print0 | sort -z |
    xargs -0 -r awk '
      FNR == 1 { n = 0 }
      /^[[:space:]]*$/ { n = 0; next }
      {
        para[n % 10] = $0; n++
        if ($0 ~ /^[[:space:]]*#/) next
        if ($0 !~ /(^|[^[:alnum:]_-])grep([^[:alnum:]_-]|$).*(\.log|\/logs\/)/) next
        print "LOGGREP"
        for (k = (n > 10 ? n - 10 : 0); k < n; k++) {
          if (para[k % 10] ~ /user-facing message check|[Ll]og checks?([^[:alnum:]]|$)/) next
        }
        print FILENAME ":" FNR ":" $0
      }')"
  total=$(grep -c '^LOGGREP$' <<<"$out")
  out="$(grep -v '^LOGGREP$' <<<"$out")"
  [[ -z "$out" ]] && return 0
  printf '%s\n' "$out"
  return 1
}

# The check finds a planted unmarked grep (so a pass below means something)
# and accepts marked ones; a marker past a blank line does not count.
plant="$TEST_TMPDIR/plant"
mkdir -p "$plant/tests/x"
cat > "$plant/tests/x/ok_test.sh" <<'SH'
# user-facing message check: the error names the flag.
((rc == 2)) && grep -q -- "--mode" "$TMP/bad.log" ||
  fail "bad --mode"
# Log check: no file records which worker stands in.
grep -q "standing in" "$dir/logs/worker-0.log" || fail "no stand-in"
pgrep -f "x.log" > /dev/null  # not a grep of a log
grep -q "step" "$dir/metrics.csv"  # not a log
SH
if ! unmarked "$plant" > /dev/null || ((total != 2)); then
  echo "FAIL: the check refuses marked log greps (or counted $total, want 2)"
  unmarked "$plant"
  exit 1
fi
printf '%s\n' '# user-facing message check: above a blank line.' '' \
  'grep -q "done" "$dir/worker-1.log" || fail "not done"' > "$plant/tests/x/bad_test.sh"
if [[ "$(unmarked "$plant")" != "$plant/tests/x/bad_test.sh:3:"* ]]; then
  echo "FAIL: the check misses a planted unmarked log grep"; exit 1
fi

# The tree is the real one, not an empty folder.
for f in tests/lib/procs.sh tests/recovery/checkpoint_kill_test.sh; do
  [[ -f "$src/$f" ]] || { echo "FAIL: $src/$f missing: not the source tree"; exit 1; }
done
if ! unmarked "$src"; then
  echo "FAIL: log greps above carry neither '# user-facing message check' nor"
  echo "'# Log check' in their paragraph (docs/testing.md, how tests read results)"
  exit 1
fi
echo "PASS: all $total log greps in tests/**/*.sh are marked"
