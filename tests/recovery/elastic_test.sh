#!/usr/bin/env bash
# training.on_failure: elastic with real processes
# (docs/failures-and-recovery.md, "Elastic workers"): a coordinator, 2 ps_server
# and 2 ps_worker processes on loopback ephemeral ports, mode async with
# staleness 1, network.lease_s = 3 (on a loaded 2-core CI machine a live process
# was once starved past a 2 s lease).
#  1. A SIGSTOPped worker is declared dead after the lease; the job does not
#     fail: the survivor, which the staleness bound held back, goes on alone
#     (the shards drop the dead rank from the slowest-worker clock) and the
#     job completes (exit 0, summary.json not failed, every step a row).
#  2. A new worker registering for the dead rank joins it (from the
#     slowest live worker's step, with a new session) and finishes with the
#     job; one asking for the live rank 0 is refused (ALREADY_EXISTS, exit
#     1). The stopped worker, continued, is refused (its session ended) and
#     exits non-zero without failing the job.
#  3. training.min_workers: with min_workers = 2 the same stop fails the
#     job, naming the dead worker and the bound.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # ROOT, TMP, start_job, ...

write_config() {  # FILE STEPS MIN_WORKERS
  cat > "$1" <<YAML
job: {name: elastic, workers: 2, servers: 2}
training: {mode: async, staleness: 1, steps: $2, local_batch: 8, on_failure: elastic, min_workers: $3}
model: {type: mlp, input_dim: 8, hidden: [8], num_classes: 2, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 2, seed: 3}
worker: {compute_ms: 2}
network: {lease_s: 3, barrier_timeout_s: 30, rpc_timeout_s: 10}
YAML
}

# 1 and 2.
STEPS=3000
dir="$TMP/async"
write_config "$TMP/async.yaml" $STEPS 1
start_job "$dir" "$TMP/async.yaml" || exit 1
wait_steps "$dir" 3
kill -STOP "${workers[1]}"
wait_for 15 "'dropped worker 1' in $dir/supervision.txt" \
  has_note "$dir" "dropped worker 1 from step [0-9]+"
timeout 30 "$WORKER" --coordinator="$addr" --rank=0 --token_file="$JOB_TOKEN" 2> "$dir/worker-0-bad.log"
rc=$?
# user-facing message check: the refused worker says why.
((rc == 1)) && grep -q "worker rank 0 is held by a live worker" "$dir/worker-0-bad.log" &&
  ok "a worker asking for the live rank 0 is refused (held by a live worker)" ||
  fail "joining the live rank 0: exit $rc: $(tail -1 "$dir/worker-0-bad.log")"
spawn "$dir/worker-1-new.log" "$WORKER" --coordinator="$addr" --rank=1 \
  --token_file="$JOB_TOKEN"
joiner=$spawned
if exited_within "$coord" 40; then
  ((rc == 0)) && ok "the job completed without worker 1 (exit 0)" ||
    fail "coordinator exited $rc: $(tail -3 "$dir/coordinator.log")"
else
  fail "the job did not complete within 40 s of stopping worker 1"
fi
# The coordinator's notes (supervision.txt): worker 1's death, its drop and
# (below) its rejoin; metrics.csv's samples below check what they did.
has_note "$dir" "dead worker 1" &&
  ok "worker 1 declared dead after the lease" ||
  fail "supervision.txt notes no death of worker 1: $(cat "$dir/supervision.txt" 2>&1)"
gone=$(noted "$dir" "dropped worker 1 from step [0-9]+" | head -1)
[[ -n "$gone" ]] && ok "supervision.txt: $gone" ||
  fail "supervision.txt notes no drop of worker 1: $(cat "$dir/supervision.txt" 2>&1)"
gone=${gone##* }
summary_ok "$dir" "$STEPS"
exited_within "${workers[0]}" 5 && ((rc == 0)) && ok "worker 0 finished (exit 0)" ||
  fail "worker 0: rc ${rc:-?}: $(tail -2 "$dir/worker-0.log")"
if exited_within "$joiner" 5; then
  ((rc == 0)) && ok "the new worker 1 finished with the job (exit 0)" ||
    fail "the new worker 1 exited $rc: $(tail -2 "$dir/worker-1-new.log")"
else
  fail "the new worker 1 still runs after the job"
fi
join=$(noted "$dir" "rejoined worker 1 from step [0-9]+" | head -1)
[[ -n "$join" ]] && ok "supervision.txt: $join" ||
  fail "supervision.txt notes no rejoin of worker 1: $(cat "$dir/supervision.txt" 2>&1)"
join=${join##* }
# Counted from its step: rows from the join step on have both workers'
# samples (2 x 8), rows between the death and the join only worker 0's.
samples_at() {
  paste <("$REPORT" metrics-get "$dir" step) <("$REPORT" metrics-get "$dir" samples) |
    awk -v s="$1" '$1 == s { print $2 }'
}
if [[ -n "$join" && -n "$gone" ]]; then
  [[ "$(samples_at "$join")" == 16 && "$(samples_at $((STEPS - 1)))" == 16 ]] &&
    ok "rows from the join step $join on count both workers (16 samples)" ||
    fail "samples at the join step $join: '$(samples_at "$join")', at the last step: '$(samples_at $((STEPS - 1)))', want 16"
  if ((join > gone)); then
    [[ "$(samples_at $((join - 1)))" == 8 ]] &&
      ok "the row before the join counts worker 0 only (8 samples)" ||
      fail "samples at step $((join - 1)): '$(samples_at $((join - 1)))', want 8"
  fi
fi
# user-facing message check: the new worker says where it joined (the rejoin
# itself is read from supervision.txt above).
grep -q "joined rank 1 again from step" "$dir/worker-1-new.log" ||
  fail "the new worker does not say where it joined"
kill -CONT "${workers[1]}"
if exited_within "${workers[1]}" 10; then
  ((rc != 0)) && ok "the continued worker 1 was refused and exited $rc" ||
    fail "the continued worker 1 exited 0"
else
  fail "the continued worker 1 still runs 10 s later"
fi

# 3. min_workers = 2: the same stop fails the job.
dir="$TMP/min_workers"
write_config "$TMP/min.yaml" 1000000 2
start_job "$dir" "$TMP/min.yaml" || exit 1
wait_steps "$dir" 3
kill -STOP "${workers[1]}"
if exited_within "$coord" 8; then
  ((rc == 1)) || fail "coordinator exited $rc, want 1"
  why=$("$REPORT" failure "$dir" 2>&1)
  [[ "$why" == "worker 1: dead"*"1 live worker left, fewer than training.min_workers = 2"* ]] &&
    ok "min_workers: $why" || fail "min_workers: summary.json failure '$why'"
else
  fail "min_workers = 2: the job still runs 8 s after worker 1 stopped"
fi
kill -KILL "${workers[1]}" 2>/dev/null

procs_finish "all elastic checks passed"
