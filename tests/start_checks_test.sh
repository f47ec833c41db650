#!/usr/bin/env bash
# Start-up checks of the binaries (issue 11, defects #7 and #11) and the job
# token across real processes:
#   - a second coordinator or server on a port a pstrain process already
#     holds exits 2 naming the address (SO_REUSEPORT is off);
#   - an advertised host that is not a host name (a literal `$(POD_NAME).ps`)
#     makes ps_server and ps_worker exit 2 at start, naming the flag;
#   - a coordinator started with a token refuses a server without it (the
#     server cannot register and gives up), and a bad token file is named.
# Every process listens on 127.0.0.1 with an ephemeral port and is stopped.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # COORD, TMP, run_logged, ...

# Runs "$@" with a time limit (run_logged); sets rc and out (stderr and
# stdout).
run() {
  run_logged 60 "$TMP/run.log" "$@"
  out="$(cat "$TMP/run.log")"
}

# coordinator_on NAME [FLAG...]: a coordinator on an ephemeral port, for the
# default job, in $TMP/NAME (start_coordinator); sets port. Exits the test
# if it did not start.
coordinator_on() {
  start_coordinator "$TMP/$1" "$ROOT/configs/default.yaml" "${@:2}" || exit 1
  port=${addr##*:}
}

# 1. Busy port: a second coordinator on the first one's port.
coordinator_on first
run "$COORD" --config="$ROOT/configs/default.yaml" --out="$TMP/second" --port="$port"
if [[ $rc -eq 2 && "$out" == *"cannot listen on 127.0.0.1:$port"* ]]; then
  ok "second coordinator on port $port exits 2"
else
  fail "second coordinator on a busy port: exit $rc, output: $out"
fi
# ... and a server on the coordinator's port.
run "$SERVER" --coordinator="127.0.0.1:$port" --port="$port" --startup_timeout_s=5
if [[ $rc -eq 2 && "$out" == *"cannot listen on 127.0.0.1:$port"* ]]; then
  ok "server on a busy port exits 2"
else
  fail "server on a busy port: exit $rc, output: $out"
fi

# 2. Unusable advertised host.
run "$SERVER" --coordinator="127.0.0.1:$port" --port=0 '--advertise_host=$(POD_NAME).ps'
if [[ $rc -eq 2 && "$out" == *"--advertise_host '\$(POD_NAME).ps' is not a host name"* ]]; then
  ok "server with advertise_host \$(POD_NAME).ps exits 2"
else
  fail "server with a bad advertise_host: exit $rc, output: $out"
fi
run "$WORKER" --coordinator="127.0.0.1:$port" '--advertise_host=ps_0..ps'
if [[ $rc -eq 2 && "$out" == *"--advertise_host"* ]]; then
  ok "worker with a bad advertise_host exits 2"
else
  fail "worker with a bad advertise_host: exit $rc, output: $out"
fi
procs_cleanup

# 3. Job token: a server without the token cannot register.
printf '%s\n' "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" >"$TMP/token"
coordinator_on with_token --token_file="$TMP/token"
run "$SERVER" --coordinator="127.0.0.1:$port" --port=0 --startup_timeout_s=3 --rpc_timeout_s=1
if [[ $rc -ne 0 && "$out" == *"requires its token"* ]]; then
  ok "server without the job token is refused (exit $rc)"
else
  fail "server without the token: exit $rc, output: $out"
fi
printf 'short\n' >"$TMP/short"
run "$SERVER" --coordinator="127.0.0.1:$port" --port=0 --token_file="$TMP/short"
if [[ $rc -eq 2 && "$out" == *"$TMP/short"* ]]; then
  ok "a bad token file is named (exit 2)"
else
  fail "bad token file: exit $rc, output: $out"
fi

procs_finish "start_checks_test: $passed passed, $failures failed" "($passed passed)"
