#!/usr/bin/env bash
# Liveness with real processes (docs/failures-and-recovery.md): a
# coordinator, 2 ps_server and 2 ps_worker processes on loopback ephemeral
# ports, network.lease_s = 2.
#  1. A SIGSTOPped worker is declared dead after the lease: the coordinator
#     fails the job at once, naming the worker in its log and in
#     summary.json's failure; every other process exits. The same for a
#     SIGKILLed worker in async mode with staleness inf (the survivor could
#     go on alone: the job used to hang without a summary), and for a
#     SIGSTOPped server.
#  2. A killed or hung (SIGSTOPped) coordinator: every server and worker
#     exits within lease_s + 1 s (plus a small scheduling allowance), and
#     within 1 s of SIGTERM before that.
#  3. network.barrier_timeout_s bounds a pull on servers and workers alike
#     (no server flag of 300 s, no rpc_timeout_s on top): with a long lease,
#     a stopped worker fails the job within the barrier timeout (5 s).
#  4. SIGTERM ends a server and a worker waiting for an absent coordinator
#     within 1 s.
#  5. Servers exit within 1 s of the job's end. A worker or server started
#     after the job ended exits 3 ("job already over"); a coordinator restarted on a finished job's folder exits 3 and
#     leaves summary.json and metrics.csv as they were.
#  6. A coordinator restarted mid-job appends to metrics.csv, and the old
#     run's servers and workers, which it does not know, leave.
#  7. psctl run: summary.json names a SIGKILLed worker (its lease ran out).
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # ROOT, TMP, start_job, ...

# The job file: lease and barrier timeout are the arguments.
write_config() {  # FILE LEASE_S BARRIER_TIMEOUT_S STEPS [MODE [STALENESS]]
  cat > "$1" <<YAML
job: {name: liveness, workers: 2, servers: 2}
training: {mode: ${5:-sync}, staleness: ${6:-0}, steps: $4, local_batch: 8, on_failure: fail}
model: {type: mlp, input_dim: 8, hidden: [8], num_classes: 2, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 2, seed: 3}
network: {lease_s: $2, barrier_timeout_s: $3, rpc_timeout_s: 10}
YAML
}

# start_training NAME LEASE_S BARRIER_TIMEOUT_S STEPS_DONE [MODE [STALENESS]]:
# a job of 1000000 steps in dir=$TMP/NAME (write_config, start_job: sets
# coord, addr, servers, workers), once STEPS_DONE steps are in its
# metrics.csv (wait_steps). Exits the test if the job did not start.
start_training() {
  dir="$TMP/$1"
  mkdir -p "$dir"
  write_config "$dir/job.yaml" "$2" "$3" 1000000 "${5:-sync}" "${6:-0}"
  start_job "$dir" "$dir/job.yaml" || exit 1
  wait_steps "$dir" "$4"
}

# ended_cleanly SECONDS WHAT PID...: each PID (a child of this shell) exits
# within SECONDS with status 0 ("ok: pid P ended within SECONDS s of WHAT,
# status 0"), else a FAIL naming its status or that it still runs.
ended_cleanly() {
  local seconds="$1" what="$2" p
  shift 2
  for p in "$@"; do
    if exited_within "$p" "$seconds"; then
      ((rc == 0)) && ok "pid $p ended within $seconds s of $what, status 0" ||
        fail "pid $p ended with status $rc after $what, want 0"
    else
      fail "pid $p still running $seconds s after $what"
    fi
  done
}

# failure_is DIR PATTERN WHAT: summary.json's failure in DIR (ps_report)
# matches the glob PATTERN: "ok: WHAT: <failure>", else a FAIL.
failure_is() {
  local why
  why=$("$REPORT" failure "$1" 2>&1)
  # shellcheck disable=SC2053 # PATTERN is a glob
  [[ "$why" == $2 ]] && ok "$3: $why" || fail "$3: summary.json failure is '$why'"
}

# 1. A SIGSTOPped worker is declared dead after lease_s.
start_training stopped 2 60 3
kill -STOP "${workers[1]}"
t0=$(now_ms)
if exited_within "$coord" 6; then
  elapsed=$(( $(now_ms) - t0 ))
  ((rc == 1)) || fail "coordinator exited with $rc, want 1"
  # lease 2 s + a heartbeat interval + the 100 ms check.
  # The silence counts from the last heartbeat, up to 0.5 s before the stop.
  if ((elapsed >= 1400 && elapsed <= 4500)); then
    ok "stopped worker declared dead after $elapsed ms (lease 2 s)"
  else
    fail "stopped worker declared dead after $elapsed ms, want ~2 s"
  fi
else
  fail "coordinator did not end the job within 6 s of SIGSTOP"
fi
failure_is "$dir" "worker 1: dead (at *): silent for * s (network.lease_s = 2); last step * (training.on_failure: fail)" \
  "summary.json names the stopped worker, its address, lease and last step"
for p in "${servers[@]}" "${workers[0]}"; do
  exited_within "$p" 3 || fail "pid $p still running 3 s after the job failed"
done
kill -KILL "${workers[1]}" 2>/dev/null

# 1b. Async with staleness inf: a killed worker (the survivor goes on alone)
#     still ends the job, with summary.json naming it; nothing hangs.
start_training async_killed 2 60 3 async inf
kill -KILL "${workers[1]}"
if exited_within "$coord" 6; then
  failure_is "$dir" "worker 1: dead*" "async inf: a killed worker fails the job"
else
  fail "async inf: the job still runs 6 s after a worker was killed"
fi
for p in "${servers[@]}" "${workers[0]}"; do
  exited_within "$p" 3 || fail "async inf: pid $p still running after the job failed"
done

# 1c. A SIGSTOPped server: declared dead and named; the coordinator does not
#     wait on it, the workers blocked on it are cancelled.
start_training server_stopped 2 60 3
kill -STOP "${servers[1]}"
if exited_within "$coord" 6; then
  failure_is "$dir" "server 1: dead*" "a stopped server is named"
else
  fail "the job still runs 6 s after a server was stopped"
fi
for p in "${servers[0]}" "${workers[@]}"; do
  exited_within "$p" 3 || fail "stopped server: pid $p still running after the job failed"
done
kill -KILL "${servers[1]}" 2>/dev/null

# 2. A killed coordinator: everyone exits within lease_s + 1 s.
start_training coordinator_killed 2 60 3
kill -KILL "$coord"
t0=$(now_ms)
for p in "${servers[@]}" "${workers[@]}"; do
  # lease 2 s + 1 s, + 0.5 s for a loaded test machine.
  if exited_within "$p" 4; then
    ((rc != 0)) || fail "pid $p exited 0 after losing its coordinator"
  else
    fail "pid $p still running 4 s after the coordinator was killed"
  fi
done
elapsed=$(( $(now_ms) - t0 ))
((elapsed >= 1400)) || fail "processes left after $elapsed ms: before the lease (2 s, less one 0.5 s heartbeat)"
ok "servers and workers exited $elapsed ms after the coordinator was killed"
# user-facing message check: a server whose coordinator is gone records
# nothing else; its log says why it left.
grep -q "silent for .* (network.lease_s = 2)" "$dir/server-0.log" ||
  fail "server 0 does not say why it left: $(tail -2 "$dir/server-0.log")"

# 2b. A hung (SIGSTOPped) coordinator: the same, its calls hang instead of
#     failing.
start_training coordinator_stopped 2 60 3
kill -STOP "$coord"
for p in "${servers[@]}" "${workers[@]}"; do
  if exited_within "$p" 4; then
    ((rc != 0)) || fail "pid $p exited 0 after its coordinator hung"
  else
    fail "pid $p still running 4 s after the coordinator hung"
  fi
done
ok "servers and workers left a hung coordinator within lease_s + 1 s"
kill -KILL "$coord"

# 2c. SIGTERM while the coordinator hangs and the lease has not run out:
#     a worker (its last report to the coordinator is bounded too) and a
#     server end cleanly long before the 30 s lease would end them (5 s:
#     a bound a loaded machine or a sanitizer build cannot break; measured
#     well under 1 s on a quiet one).
start_training coordinator_stopped_sigterm 30 60 3
kill -STOP "$coord"
sleep 0.2
kill -TERM "${workers[0]}" "${servers[0]}"
ended_cleanly 5 "SIGTERM with its coordinator hung" "${workers[0]}" "${servers[0]}"
kill -KILL "$coord" "${workers[1]}" "${servers[1]}" 2>/dev/null

# 3. One barrier timeout for servers and workers.
# 5 s, not less: the first barrier also waits for the other worker's
# start-up, which takes seconds on a loaded machine.
start_training barrier 60 5 3
kill -STOP "${workers[1]}"
t0=$(now_ms)
if exited_within "$coord" 12; then
  elapsed=$(( $(now_ms) - t0 ))
  # 5 s of barrier wait (less the server's margin), then the failure report
  # and shutdown; the old bound was barrier + rpc_timeout_s (10 s) = 15 s.
  ((elapsed <= 7500)) && ok "barrier_timeout_s 5 ended the job after $elapsed ms" ||
    fail "barrier_timeout_s 5 ended the job only after $elapsed ms"
else
  fail "job still running 12 s after a worker stopped (barrier_timeout_s 5)"
fi
kill -KILL "${workers[1]}" 2>/dev/null

# 4. SIGTERM while waiting for an absent coordinator.
dir="$TMP/sigterm"
mkdir -p "$dir"
spawn "$dir/server.log" "$SERVER" --coordinator=127.0.0.1:1 --startup_timeout_s=60 \
  --token_file="$JOB_TOKEN"
s=$spawned
spawn "$dir/worker.log" "$WORKER" --coordinator=127.0.0.1:1 --startup_timeout_s=60 \
  --token_file="$JOB_TOKEN"
w=$spawned
# Both are waiting once they say so.
both_waiting() {
  file_has "$dir/server.log" "waiting for coordinator" &&
    file_has "$dir/worker.log" "waiting for coordinator"
}
wait_for 15 "'waiting for coordinator' in $dir/server.log and worker.log" both_waiting
kill -TERM "$s" "$w"
ended_cleanly 1 "SIGTERM" "$s" "$w"
# user-facing message check: each says it was stopped while waiting.
grep -q "stopped while" "$dir/server.log" || fail "server: $(tail -1 "$dir/server.log")"
grep -q "stopped while" "$dir/worker.log" || fail "worker: $(tail -1 "$dir/worker.log")"

# 5. Started after the job ended.
dir="$TMP/over"
mkdir -p "$dir"
write_config "$dir/job.yaml" 2 60 5
start_coordinator "$dir" "$dir/job.yaml" --keep_serving_after_job || exit 1
start_servers "$dir" 2
start_workers "$dir" 2
wait_for 15 "$dir/summary.json" test -s "$dir/summary.json" ||
  fail "the short job did not finish"
# The servers were told to shut down before summary.json was written.
ended_cleanly 1 "the job's end" "${servers[@]}"
timeout 10 "$WORKER" --coordinator="$addr" --token_file="$JOB_TOKEN" 2> "$dir/late-worker.log"
rc=$?
((rc == 3)) && ok "a worker started after the end exits 3" ||
  fail "late worker exited $rc, want 3: $(tail -1 "$dir/late-worker.log")"
timeout 10 "$SERVER" --coordinator="$addr" --token_file="$JOB_TOKEN" 2> "$dir/late-server.log"
rc=$?
((rc == 3)) && ok "a server started after the end exits 3" ||
  fail "late server exited $rc, want 3: $(tail -1 "$dir/late-server.log")"
kill -TERM "$coord"
exited_within "$coord" 2 || fail "coordinator did not stop on SIGTERM"
before=$(md5sum "$dir/summary.json" "$dir/metrics.csv")
timeout 10 "$COORD" --config="$dir/job.yaml" --port=0 --out="$dir" --quiet \
  --token_file="$JOB_TOKEN" \
  2> "$dir/restarted.log"
rc=$?
((rc == 3)) && ok "a coordinator restarted on a finished job exits 3" ||
  fail "restarted coordinator exited $rc, want 3: $(tail -1 "$dir/restarted.log")"
[[ "$(md5sum "$dir/summary.json" "$dir/metrics.csv")" == "$before" ]] &&
  ok "the finished job's summary.json and metrics.csv are untouched" ||
  fail "the finished job's results changed"

# 6. A coordinator restarted mid-job on the same port and folder: it appends
#    to metrics.csv (never truncates it), and the old run's servers and
#    workers, unknown to it, leave at their next heartbeat.
start_training restarted 10 60 5
port=$(cat "$dir/port")
kill -KILL "$coord"
wait "$coord" 2>/dev/null
rows_before=$(wc -l < "$dir/metrics.csv")
spawn "$dir/coordinator-2.log" "$COORD" --config="$dir/job.yaml" --port="$port" \
  --out="$dir" --quiet --startup_timeout_s=30 --token_file="$JOB_TOKEN"
coord=$spawned
for p in "${servers[@]}" "${workers[@]}"; do
  # Well before the 10 s lease: the new coordinator answers NOT_FOUND.
  exited_within "$p" 5 || fail "pid $p still running 5 s after the coordinator restarted"
done
ok "the old run's processes left the restarted coordinator"
rows_after=$(wc -l < "$dir/metrics.csv")
((rows_after >= rows_before && rows_before > 5)) &&
  ok "metrics.csv kept its $rows_before lines" ||
  fail "metrics.csv went from $rows_before to $rows_after lines"
[[ ! -e "$dir/summary.json" ]] || fail "summary.json written before the restarted job ended"
kill -TERM "$coord"
exited_within "$coord" 2 || fail "restarted coordinator did not stop on SIGTERM"

# 7. psctl run: a worker killed with SIGKILL (it cannot report) fails the
#    job, and summary.json names it (its lease ran out), not a symptom such
#    as "coordinator stopped by signal".
dir="$TMP/psctl"
mkdir -p "$dir"
sed 's/^\( *lease_s:\).*/\1 2/' "$ROOT/configs/default.yaml" > "$dir/job.yaml"
psctl_start "$dir/out" "$dir/psctl.log" --config "$dir/job.yaml" --steps 1000000
wait_for --while "$psctl_pid" 20 "'step ' in $dir/out/logs/coordinator.log" \
  file_has "$dir/out/logs/coordinator.log" "step "
victim=$(psctl_child "$dir/out" --rank=1)
if [[ -n "$victim" ]]; then
  kill -KILL "$victim"
  if exited_within "$psctl_pid" 10; then
    ((rc == 1)) || fail "psctl run exited $rc after a killed worker, want 1"
    failure_is "$dir/out" "worker 1: dead*" "psctl run: summary.json names the killed worker"
  else
    fail "psctl run still running 10 s after a worker was killed"
  fi
else
  fail "psctl run: no worker 1 to kill: $(tail -3 "$dir/psctl.log")"
fi

procs_finish "all liveness checks passed"
