#!/usr/bin/env bash
# Start-up checks of the binaries (issue 11, defects #7 and #11) and the job
# token across real processes:
#   - a second coordinator or server on a port a pstrain process already
#     holds exits 2 naming the address (SO_REUSEPORT is off);
#   - an advertised host that is not a host name (a literal `$(POD_NAME).ps`)
#     makes ps_server and ps_worker exit 2 at start, naming the flag, and
#     so does a ps_worker --openblas_thread_timeout out of range;
#   - secure by default: a coordinator, server or worker without a token
#     refuses to start (exit 2) unless the job file sets security.insecure;
#     a coordinator refuses a server with another token (it cannot
#     register and gives up), and a bad token file is named.
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
run "$COORD" --config="$ROOT/configs/default.yaml" --out="$TMP/second" --port="$port" \
  --token_file="$JOB_TOKEN"
if [[ $rc -eq 2 && "$out" == *"cannot listen on 127.0.0.1:$port"* ]]; then
  ok "second coordinator on port $port exits 2"
else
  fail "second coordinator on a busy port: exit $rc, output: $out"
fi
# ... and a server on the coordinator's port.
run "$SERVER" --coordinator="127.0.0.1:$port" --port="$port" --startup_timeout_s=5 \
  --token_file="$JOB_TOKEN"
if [[ $rc -eq 2 && "$out" == *"cannot listen on 127.0.0.1:$port"* ]]; then
  ok "server on a busy port exits 2"
else
  fail "server on a busy port: exit $rc, output: $out"
fi

# 2. Unusable advertised host.
run "$SERVER" --coordinator="127.0.0.1:$port" --port=0 '--advertise_host=$(POD_NAME).ps' \
  --token_file="$JOB_TOKEN"
if [[ $rc -eq 2 && "$out" == *"--advertise_host '\$(POD_NAME).ps' is not a host name"* ]]; then
  ok "server with advertise_host \$(POD_NAME).ps exits 2"
else
  fail "server with a bad advertise_host: exit $rc, output: $out"
fi
run "$WORKER" --coordinator="127.0.0.1:$port" '--advertise_host=ps_0..ps' \
  --token_file="$JOB_TOKEN"
if [[ $rc -eq 2 && "$out" == *"--advertise_host"* ]]; then
  ok "worker with a bad advertise_host exits 2"
else
  fail "worker with a bad advertise_host: exit $rc, output: $out"
fi
# ... and an OpenBLAS idle time outside OpenBLAS's range.
run "$WORKER" --coordinator="127.0.0.1:$port" --openblas_thread_timeout=31 \
  --token_file="$JOB_TOKEN"
if [[ $rc -eq 2 && "$out" == *"--openblas_thread_timeout: expected 0"*"got 31"* ]]; then
  ok "worker with --openblas_thread_timeout=31 exits 2"
else
  fail "worker with a bad --openblas_thread_timeout: exit $rc, output: $out"
fi
procs_cleanup

# 3. Job token: secure by default (docs/security.md). A process started
#    without a token refuses to start (exit 2); the message naming the flag,
#    how to make a token and the opt-out is a deliberate check of what a
#    user reads.
coordinator_on with_token
for who in "$COORD --config=$ROOT/configs/default.yaml --port=0 --out=$TMP/no_token" \
  "$SERVER --coordinator=127.0.0.1:$port --port=0" \
  "$WORKER --coordinator=127.0.0.1:$port"; do
  # shellcheck disable=SC2086 # the words of $who are the command
  run $who
  if [[ $rc -eq 2 && "$out" == *"--token_file: required"* &&
    "$out" == *"openssl rand -hex 32"* && "$out" == *"security: {insecure: true}"* ]]; then
    ok "${who%% *} without a token refuses to start (exit 2, names the flag and the opt-out)"
  else
    fail "${who%% *} without a token: exit $rc, output: $out"
  fi
done
# ... and a server with another token cannot register.
printf '%s\n' "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" >"$TMP/other_token"
run "$SERVER" --coordinator="127.0.0.1:$port" --port=0 --startup_timeout_s=3 --rpc_timeout_s=1 \
  --token_file="$TMP/other_token"
if [[ $rc -ne 0 && "$out" == *"wrong job token"* ]]; then
  ok "server with another job's token is refused (exit $rc)"
else
  fail "server with a wrong token: exit $rc, output: $out"
fi
# The opt-out: security.insecure lets a coordinator start without a token,
# with a warning (a deliberate check of the warning's wording).
# user-facing message check: the warning.
cp "$ROOT/configs/default.yaml" "$TMP/insecure.yaml"
printf '\nsecurity:\n  insecure: true\n' >>"$TMP/insecure.yaml"
mkdir -p "$TMP/insecure"
spawn "$TMP/insecure/coordinator.log" "$COORD" --config="$TMP/insecure.yaml" --port=0 \
  --port_file="$TMP/insecure/port" --out="$TMP/insecure" --quiet
if wait_for --while "$spawned" 10 "the insecure coordinator's port" test -s "$TMP/insecure/port" &&
  file_has "$TMP/insecure/coordinator.log" "WITHOUT a job token"; then
  ok "security.insecure: the coordinator starts without a token and warns"
else
  fail "security.insecure coordinator: $(tail -2 "$TMP/insecure/coordinator.log")"
fi
printf 'short\n' >"$TMP/short"
run "$SERVER" --coordinator="127.0.0.1:$port" --port=0 --token_file="$TMP/short"
if [[ $rc -eq 2 && "$out" == *"$TMP/short"* ]]; then
  ok "a bad token file is named (exit 2)"
else
  fail "bad token file: exit $rc, output: $out"
fi

# 4. A valid config's surprise is said before anything starts: the dry run
#    (what psctl run does first) warns that fp16 on the wire saturates.
sed 's/^network:$/network:\n  wire_dtype: fp16/' "$ROOT/configs/default.yaml" >"$TMP/fp16.yaml"
run "$COORD" --config="$TMP/fp16.yaml" --dry_run
if [[ $rc -eq 0 && "$out" == *"warning: network.wire_dtype: fp16"* ]]; then
  ok "the dry run warns that an fp16 wire saturates beyond +-65504"
else
  fail "dry run of an fp16 job: exit $rc, output: $(tail -3 "$TMP/run.log")"
fi

procs_finish "start_checks_test: $passed passed, $failures failed" "($passed passed)"
