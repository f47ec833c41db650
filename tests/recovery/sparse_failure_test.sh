#!/usr/bin/env bash
# Row-sparse tables (model.type wide_deep, docs/sparse.md) recover from a lost
# worker bit for bit in mode sync, as the dense path does
# (docs/failures-and-recovery.md):
#  1. The undisturbed job (a coordinator, 2 ps_server, 2 ps_worker processes
#     on loopback ephemeral ports), with a final checkpoint.
#  2. training.on_failure: elastic: worker 1 SIGKILLed after a random number
#     of steps; worker 0 stands in for rank 1 (it pulls the rank's rows and
#     pushes its row gradient beside its dense one, from the step whose
#     weights it holds, whatever worker 1 had pushed to which shard); the job
#     completes and the final shard files (dense chunks, rows, their AdaGrad
#     slots and per-row update counts) are byte-identical (cmp) to the
#     undisturbed run's.
#  3. training.on_failure: restart under psctl: worker 1 SIGKILLed after a
#     checkpoint; psctl restarts it, every process rolls back, and the final
#     shard files are byte-identical to the undisturbed run's.
set -uo pipefail

source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # REPORT, TMP, run_job, ...

chaos_seed
STEPS=120
job_yaml() {  # NAME ON_FAILURE [EXTRA TRAINING KEYS]
  cat <<YAML
job: {name: $1, workers: 2, servers: 2}
training: {mode: sync, steps: $STEPS, local_batch: 16, optimizer: adagrad, base_lr: 0.05, on_failure: $2${3:-}}
model: {type: wide_deep, input_dim: 6, bottom_hidden: [8], sparse_columns: 3, buckets: 50000, embedding_dim: 4, hidden: [16], num_classes: 3, seed: 1}
data: {source: synthetic, num_features: 6, num_classes: 3, seed: 3, test_examples: 200, sparse_columns: 3, sparse_cardinality: 5000, zipf_exponent: 1.1}
evaluation: {every_steps: 40}
worker: {compute_ms: 8}
network: {lease_s: 1, barrier_timeout_s: 30, rpc_timeout_s: 10}
checkpoint: {every_steps: 20}
YAML
}
job_yaml sparse-elastic elastic > "$TMP/elastic.yaml"
final=$(ckpt_step "$STEPS")
files=(shard-00000-of-00002.ckpt shard-00001-of-00002.ckpt)

# 1. The undisturbed job.
calm="$TMP/calm"
run_job "$calm" "$TMP/elastic.yaml" 60 || exit 1
[[ -f "$calm/$final/MANIFEST.json" ]] || { fail "no final checkpoint in the undisturbed run"; exit 1; }

# 2. Elastic: worker 1 SIGKILLed mid-job.
dir="$TMP/elastic"
start_job "$dir" "$TMP/elastic.yaml" || exit 1
kill_after=$((10 + RANDOM % 60))
wait_steps "$dir" "$kill_after"
kill -KILL "${workers[1]}"
echo "worker 1 SIGKILLed after about $kill_after steps"
if exited_within "$coord" 60; then
  ((rc == 0)) && ok "the elastic job completed (exit 0)" ||
    fail "coordinator exited $rc: $(tail -3 "$dir/coordinator.log")"
else
  fail "the elastic job did not complete within 60 s"
fi
# The live worker 0 stood in for rank 1 (it names itself in the takeover).
line=$(noted "$dir" "taken over worker 1 from step [0-9]+ by worker 0" | head -1)
[[ -n "$line" ]] && ok "supervision.txt: $line" ||
  fail "supervision.txt notes no takeover by worker 0: $(cat "$dir/supervision.txt" 2>&1)"
summary_ok "$dir" "$STEPS"
exited_within "${workers[0]}" 5 && ((rc == 0)) && ok "worker 0 finished (exit 0)" ||
  fail "worker 0: rc ${rc:-?}: $(tail -2 "$dir/worker-0.log")"
if [[ -f "$dir/$final/MANIFEST.json" ]]; then
  before=$failures
  same_files "$calm/$final" "$dir/$final" "elastic: the undisturbed run against the killed one" "${files[@]}"
  ((failures == before)) && ok "elastic: final shard files byte-identical to the undisturbed run's"
else
  fail "the elastic job has no final checkpoint"
fi
if ((failures)); then
  echo "--- coordinator"; tail -20 "$dir/coordinator.log"
  echo "--- worker 0"; tail -20 "$dir/worker-0.log"
fi
procs_cleanup

# 3. Restart under psctl: worker 1 SIGKILLed after a checkpoint. (The
# training keys differ from the undisturbed job's in on_failure only, which
# no shard file holds.)
job_yaml sparse-elastic restart ", restart_timeout_s: 30, max_restarts: 3" > "$TMP/restart.yaml"
dir="$TMP/restart"
kill_step=$((20 * (1 + RANDOM % 4)))
psctl_start "$dir" "$dir.log" --config "$TMP/restart.yaml"
kill_after_checkpoint "$dir" "$kill_step" --rank=1 "$((RANDOM % 100))"
psctl_succeeded 120 "$dir.log" "the restart job with a killed worker"
procs_cleanup
restarted_after_kills "$dir" 1 worker-1
if [[ -f "$dir/$final/MANIFEST.json" ]]; then
  before=$failures
  same_files "$calm/$final" "$dir/$final" "restart: the undisturbed run against the killed one" "${files[@]}"
  ((failures == before)) && ok "restart: final shard files byte-identical to the undisturbed run's"
else
  fail "the restart job has no final checkpoint"
fi
procs_finish "PASS"
