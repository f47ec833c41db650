#!/usr/bin/env bash
# Failure runs (issue 22): who is blamed and how processes exit when a job
# fails, read through ps_report (exit codes and summary.json's fields, not
# log wording). Each job is small; network.lease_s is 2 unless a check needs
# the lease ruled out as the cause.
#  1. A SIGKILLed worker (on_failure fail): every server exits 1 (a failed
#     job, docs/failures-and-recovery.md "Exit codes"), and the failed
#     summary's final_eval_loss is null like final_accuracy (no final
#     evaluation ran).
#  2. A server SIGTERMed mid-training reports its own stop: the cause is
#     "server K: stopped: ...", with a 60 s lease that cannot have run out.
#  3. A coordinator SIGSTOPped past the lease, then continued: the cause is
#     the coordinator's stall, not "server K: dead".
#  4. psctl: a SIGKILLed coordinator leaves a summary.json written by psctl
#     (failure.process coordinator, naming SIGKILL); psctl exits 1.
#  5. psctl: Ctrl-C (SIGINT to psctl and every process it started) exits
#     130, and the cause is the coordinator's stop, not a worker's.
#  6. psctl, on_failure restart: a SIGSTOPped (hung) worker is ended by psctl
#     once the coordinator declares it lost, started again, and the job
#     succeeds; one restart is used.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # ROOT, TMP, start_job, ...

write_config() { # FILE LEASE_S STEPS [ON_FAILURE]
  cat >"$1" <<YAML
job: {name: failures, workers: 2, servers: 2}
training: {mode: sync, steps: $3, local_batch: 8, on_failure: ${4:-fail}}
model: {type: mlp, input_dim: 8, hidden: [8], num_classes: 2, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 2, seed: 3, test_examples: 64}
network: {lease_s: $2, barrier_timeout_s: 120, rpc_timeout_s: 10}
YAML
}

# summary_is DIR KEY WANT WHAT: ps_report summary-get DIR KEY is WANT.
summary_is() {
  local got
  got=$("$REPORT" summary-get "$1" "$2" 2>&1)
  [[ "$got" == "$3" ]] && ok "$4: $2 = $got" || fail "$4: $2 = '$got', want '$3'"
}
# summary_matches DIR KEY GLOB WHAT: the same, against a glob.
summary_matches() {
  local got
  got=$("$REPORT" summary-get "$1" "$2" 2>&1)
  # shellcheck disable=SC2053 # a glob
  [[ "$got" == $3 ]] && ok "$4: $2 = $got" || fail "$4: $2 = '$got', want $3"
}

# start_training NAME LEASE_S STEPS_DONE: a long job in dir=$TMP/NAME
# (start_job), once STEPS_DONE steps are in its metrics.csv.
start_training() {
  dir="$TMP/$1"
  mkdir -p "$dir"
  write_config "$dir/job.yaml" "$2" 1000000
  start_job "$dir" "$dir/job.yaml" || exit 1
  wait_steps "$dir" "$3"
}

# 1. A killed worker: servers exit 1; final_eval_loss is null.
start_training worker_killed 2 3
kill -KILL "${workers[1]}"
if exited_within "$coord" 30; then
  ((rc == 1)) && ok "coordinator of the failed job exits 1" || fail "coordinator exited $rc, want 1"
else
  fail "the job still runs 30 s after a worker was killed"
fi
for k in 0 1; do
  if exited_within "${servers[k]}" 20; then
    ((rc == 1)) && ok "server $k exits 1 after the failed job" ||
      fail "server $k exited $rc after the failed job, want 1"
  else
    fail "server $k still runs 20 s after the job failed"
  fi
done
summary_is "$dir" failed true "killed worker"
summary_is "$dir" failure.process worker "killed worker"
summary_is "$dir" final_eval_loss null "killed worker"
summary_is "$dir" final_accuracy null "killed worker"

# 2. A server SIGTERMed mid-training reports its own stop (the 60 s lease
#    cannot explain an end within 30 s).
start_training server_terminated 60 3
kill -TERM "${servers[1]}"
if exited_within "$coord" 30; then
  summary_is "$dir" failure.process server "SIGTERMed server"
  summary_is "$dir" failure.shard 1 "SIGTERMed server"
  summary_matches "$dir" failure.message "stopped: *signal*" "SIGTERMed server"
  # The surviving processes learn that the job failed from the coordinator
  # (its 60 s lease cannot have run out): they exit 1.
  for p in "${workers[@]}" "${servers[0]}"; do
    if exited_within "$p" 30; then
      ((rc == 1)) && ok "pid $p exits 1 after the job failed" || fail "pid $p exited $rc, want 1"
    else
      fail "pid $p still runs 30 s after the job failed (lease 60 s)"
    fi
  done
else
  fail "the job still runs 30 s after server 1 got SIGTERM (its lease is 60 s)"
fi

# 3. A coordinator stopped past the lease, then continued: its own stall is
#    the cause, not the servers and workers that took it for gone.
start_training coordinator_stalled 2 3
kill -STOP "$coord"
for p in "${servers[@]}" "${workers[@]}"; do
  exited_within "$p" 20 || fail "pid $p still runs 20 s after the coordinator stopped"
done
# Stopped well past the lease, however fast the others noticed.
sleep 3
kill -CONT "$coord"
if exited_within "$coord" 20; then
  ((rc == 1)) || fail "the stalled coordinator exited $rc, want 1"
  summary_is "$dir" failure.process coordinator "stalled coordinator"
  summary_matches "$dir" failure.message "*not running for*network.lease_s*" "stalled coordinator"
else
  fail "the coordinator still runs 20 s after SIGCONT"
fi
procs_cleanup

# psctl runs: the children of a run are found by its unique token path.
children_of() { pgrep -f -- "--token_file=$1/token"; }

# 4. psctl: a SIGKILLed coordinator. psctl records what it saw.
dir="$TMP/psctl_coordinator_killed"
write_config "$TMP/long.yaml" 2 1000000
psctl_start "$dir" "$dir.log" --config "$TMP/long.yaml"
if wait_steps "$dir" 3 60; then
  kill -KILL "$(pgrep -f -- "ps_coordinator .*--token_file=$dir/token" | head -1)"
  if exited_within "$psctl_pid" 60; then
    ((rc == 1)) && ok "psctl exits 1 when the coordinator is killed" || fail "psctl exited $rc, want 1"
    summary_is "$dir" failed true "killed coordinator"
    summary_is "$dir" failure.process coordinator "killed coordinator"
    summary_matches "$dir" failure.message "*killed by SIGKILL*" "killed coordinator"
    summary_matches "$dir" wall_s "[0-9]*" "killed coordinator"
    "$REPORT" failure "$dir" >/dev/null && ok "ps_report failure reads the cause" ||
      fail "ps_report failure: exit $?"
  else
    fail "psctl still runs 60 s after its coordinator was killed"
  fi
fi

# 5. psctl: Ctrl-C, i.e. SIGINT to psctl and to every process it started.
dir="$TMP/psctl_ctrl_c"
psctl_start "$dir" "$dir.log" --config "$TMP/long.yaml"
if wait_steps "$dir" 3 60; then
  mapfile -t kids < <(children_of "$dir")
  kill -INT "$psctl_pid" "${kids[@]}"
  if exited_within "$psctl_pid" 60; then
    ((rc == 130)) && ok "psctl exits 130 on Ctrl-C" || { cat "$dir.log"; fail "psctl exited $rc on Ctrl-C, want 130"; }
    summary_is "$dir" failure.process coordinator "Ctrl-C"
    summary_is "$dir" failure.message "coordinator stopped by signal" "Ctrl-C"
  else
    fail "psctl still runs 60 s after Ctrl-C"
  fi
fi

# 6. psctl, on_failure restart: a hung worker is ended, restarted, and the
#    job recovers (it used to fail after lease + restart timeout, then
#    "restart" the workers that had exited because it failed).
dir="$TMP/psctl_hung_worker"
cat >"$TMP/restart.yaml" <<YAML
job: {name: hung, workers: 2, servers: 2}
training: {mode: sync, steps: 150, local_batch: 8, on_failure: restart,
           restart_timeout_s: 30, max_restarts: 3}
model: {type: mlp, input_dim: 8, hidden: [8], num_classes: 2, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 2, seed: 3, test_examples: 64}
worker: {compute_ms: 20}
network: {lease_s: 2, rpc_timeout_s: 10}
checkpoint: {every_steps: 10}
YAML
psctl_start "$dir" "$dir.log" --config "$TMP/restart.yaml"
if wait_steps "$dir" 15 60; then
  victim=$(psctl_child "$dir" --rank=1)
  kill -STOP "$victim"
  if exited_within "$psctl_pid" 120; then
    kill -KILL "$victim" 2>/dev/null
    if ((rc == 0)); then
      ok "the job with a hung worker succeeds"
      summary_is "$dir" failed false "hung worker"
      summary_is "$dir" steps 150 "hung worker"
    else
      cat "$dir.log"
      fail "the job with a hung worker failed (psctl exit $rc): $("$REPORT" failure "$dir" 2>&1)"
    fi
    grep -q "^lost [0-9]* worker 1$" "$dir/supervision.txt" &&
      ok "the coordinator declared worker 1 lost" || fail "supervision.txt: $(cat "$dir/supervision.txt" 2>&1)"
    ! running "$victim" && ok "the hung worker (pid $victim) is gone" || fail "the hung worker $victim still runs"
  else
    kill -KILL "$victim" 2>/dev/null
    fail "psctl still runs 120 s after a worker hung"
  fi
fi

procs_finish "failure_run_test: $passed passed, $failures failed" "($passed passed)"
