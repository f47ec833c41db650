#!/usr/bin/env bash
# Every psctl subcommand answers --help and -h with its usage and exit status
# 0, and does nothing else: no install, no build, nothing written (issue 22).
# The tools psctl installs and builds with are stubs that record any call.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # PSCTL, TMP, ok, fail

# A private copy of psctl: its folder is its root (runs/, .cache/ go there).
PSCTL_HOME="$TMP/root"
mkdir -p "$PSCTL_HOME"
cp "$PSCTL" "$PSCTL_HOME/psctl"
PSCTL="$PSCTL_HOME/psctl"

STUBS="$TMP/stubs" CALLS="$TMP/calls"
mkdir -p "$STUBS"
: >"$CALLS"
for tool in bazel apt-get sudo dpkg-query dpkg-deb clang-14 clang++-14 mpicxx \
  mpirun iperf3 gnuplot kubectl podman buildah; do
  printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 97\n' "$tool" "$CALLS" >"$STUBS/$tool"
  chmod +x "$STUBS/$tool"
done

# The subcommands main() dispatches (its "name) ..." lines), so that a new
# one is checked too; the eight known ones must be among them.
mapfile -t subs < <(sed -n '/^main() {/,/^}/p' "$PSCTL" |
  sed -n 's/^    \([a-z][a-z]*\)) .*/\1/p')
for want in demo test run compare bench fuzz setup build; do
  [[ " ${subs[*]} " == *" $want "* ]] || fail "psctl's main() dispatches no '$want' (found: ${subs[*]})"
done

for sub in "${subs[@]}"; do
  for flag in --help -h; do
    rc=0
    # timeout only guards against a hang; no time is asserted.
    PATH="$STUBS:$PATH" timeout 60 "$PSCTL" "$sub" "$flag" \
      >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
    ran="$(cut -d' ' -f1 "$CALLS" | sort -u | xargs)"
    if ((rc != 0)); then
      cat "$TMP/out" "$TMP/err"; fail "psctl $sub $flag: exit status $rc, want 0${ran:+ (it ran $ran)}"
    # user-facing message check: the usage line.
    elif ! grep -q "^usage: ./psctl $sub\b" "$TMP/out"; then
      cat "$TMP/out" "$TMP/err"; fail "psctl $sub $flag: no line 'usage: ./psctl $sub ...' on stdout"
    elif [[ -s "$TMP/err" ]]; then
      cat "$TMP/err"; fail "psctl $sub $flag: wrote to stderr (it did more than print its usage)"
    elif [[ -s "$CALLS" ]]; then
      cat "$CALLS"; fail "psctl $sub $flag: ran $ran"
    else
      ok "psctl $sub $flag: $(head -n 1 "$TMP/out")"
    fi
    : >"$CALLS"
  done
done

# And wrote nothing beside itself.
left="$(cd "$PSCTL_HOME" && find . -mindepth 1 ! -name psctl | sort | xargs)"
if [[ -n "$left" ]]; then fail "psctl --help wrote $left"; else ok "nothing written"; fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
