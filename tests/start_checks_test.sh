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

ROOT="$TEST_SRCDIR/pstrain"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
COORD="$ROOT/coordinator/ps_coordinator"
SERVER="$ROOT/server/ps_server"
WORKER="$ROOT/worker/ps_worker"
failures=0 passed=0 pids=()
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; passed=$((passed + 1)); }
cleanup() { local p; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

# Runs "$@" with a time limit; sets rc and out (stderr and stdout).
run() { out="$(timeout 60 "$@" 2>&1)"; rc=$?; }

# Starts a coordinator on an ephemeral port; sets coord_pid and port.
start_coordinator() {
  local port_file="$TMP/port.$RANDOM"
  "$COORD" --config="$ROOT/configs/default.yaml" --out="$TMP/out.$RANDOM" --port=0 \
    --port_file="$port_file" "$@" 2>"$TMP/coordinator.log" &
  coord_pid=$!
  pids+=("$coord_pid")
  for _ in $(seq 1 200); do [[ -s "$port_file" ]] && break; sleep 0.05; done
  port="$(cat "$port_file" 2>/dev/null)"
  [[ -n "$port" ]] || { fail "coordinator did not start"; cat "$TMP/coordinator.log"; exit 1; }
}

# 1. Busy port: a second coordinator on the first one's port.
start_coordinator
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
kill "$coord_pid" 2>/dev/null; wait "$coord_pid" 2>/dev/null

# 3. Job token: a server without the token cannot register.
printf '%s\n' "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" >"$TMP/token"
start_coordinator --token_file="$TMP/token"
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

echo "start_checks_test: $passed passed, $failures failed"
((failures == 0))
