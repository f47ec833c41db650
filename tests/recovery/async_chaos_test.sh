#!/usr/bin/env bash
# Async chaos, as separate processes through psctl
# (docs/failures-and-recovery.md, docs/checkpoints.md). The job: mode async,
# staleness 2, three workers of which one is a 2x straggler (so workers run at
# different clocks), Adam on a cosine schedule, a checkpoint (a consistent clock
# cut) every 10 of 100 steps.
#
# 1. The undisturbed job.
# 2. training.on_failure: restart: SIGKILL of a seeded random server a
#    seeded random delay after the checkpoint of a seeded random step, then,
#    after the first rollback, of a seeded random worker the same way.
#    `psctl run` restarts each killed process, the coordinator rolls every
#    shard back to the newest complete cut and every worker resumes there
#    (survivors in-process); the job completes with a final test accuracy
#    within TOLERANCE of the undisturbed run's (async runs differ by push
#    order, so not bit for bit).
# 3. training.on_failure: fail: SIGKILL of the same server at the same step
#    fails the job; `psctl run --resume latest` in the same folder continues
#    from the newest complete cut and completes within the same tolerance.
#
# The seed: $CHAOS_SEED (bazel test --test_env=CHAOS_SEED=N), else drawn
# from the clock; it is printed, so a failure can be replayed.
set -uo pipefail

source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # REPORT, TMP, psctl_run, ...
TOLERANCE=0.05  # absolute test accuracy (400 test examples)
STEPS=100

chaos_seed chaos
server_victim=$((RANDOM % 2))
worker_victim=$((RANDOM % 3))
server_step=$((10 * (2 + RANDOM % 3)))                # 20..40
worker_step=$((server_step + 10 * (2 + RANDOM % 3)))  # 40..80
server_delay_ms=$((RANDOM % 200))
worker_delay_ms=$((RANDOM % 200))
echo "plan: SIGKILL server-$server_victim ${server_delay_ms} ms after the checkpoint of step $server_step," \
  "worker-$worker_victim ${worker_delay_ms} ms after the checkpoint of step $worker_step"

# $1: training.on_failure. checkpoint.keep 0 keeps every manifest, which the
# kills are timed by.
write_job() {
  cat > "$TMP/job-$1.yaml" <<EOF
job: {name: async-chaos, workers: 3, servers: 2}
training:
  mode: async
  staleness: 2
  optimizer: adam
  base_lr: 0.01
  lr_schedule: cosine
  warmup_steps: 5
  local_batch: 16
  steps: $STEPS
  on_failure: $1
  restart_timeout_s: 20
  max_restarts: 4  # 2 kills, and room for a process starved past its lease
model: {type: mlp, input_dim: 16, hidden: [24], num_classes: 4, seed: 5}
data: {source: synthetic, seed: 9, num_features: 16, num_classes: 4, test_examples: 400}
worker: {compute_ms: 15, straggler_rank: 2, straggler_factor: 2}
server: {chunk_bytes: 256}
network: {lease_s: 2}
checkpoint: {every_steps: 10}
EOF
}
write_job fail
write_job restart
final=$(ckpt_step "$STEPS")

# Whether accuracy $1 is within TOLERANCE of $2 (and the job learned).
within() {
  awk -v a="$2" -v b="$1" -v t="$TOLERANCE" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0.5 && d <= t) }'
}

# 1. The undisturbed job.
psctl_undisturbed "$TMP/a" "$TMP/job-fail.yaml" "$final"
"$CHECKPOINT" inspect "$TMP/a/ckpt" > "$TMP/inspect-a.log" 2>&1 ||
  { cat "$TMP/inspect-a.log"; fail "ps_checkpoint inspect refused the job's checkpoints"; }
acc_a=$("$REPORT" summary-get "$TMP/a" final_accuracy)

# 2. on_failure: restart, a server and a worker killed.
dir="$TMP/r"
psctl_start "$dir" "$dir.log" --config "$TMP/job-restart.yaml"
# The second kill after the first rollback, so that both are exercised.
kill_twice "$dir" "$server_step" "--shard=$server_victim" "$server_delay_ms" \
  "$worker_step" "--rank=$worker_victim" "$worker_delay_ms"
if ! exited_within "$psctl_pid" 120; then
  fail "the job with two killed processes still runs 120 s later (on_failure: restart)"
elif ((rc == 0)); then
  restarted_and_rolled_back "$dir" "$server_victim" "$worker_victim" \
    "$(((worker_victim + 1) % 3))"
  [[ -f "$dir/$final/MANIFEST.json" ]] || fail "the job with kills wrote no final checkpoint"
  summary_succeeded "$dir" "the job with kills"
  acc_r=$("$REPORT" summary-get "$dir" final_accuracy)
  echo "final test accuracy: undisturbed $acc_a, killed and restarted $acc_r (tolerance $TOLERANCE)"
  within "$acc_r" "$acc_a" ||
    fail "accuracy $acc_r is not within $TOLERANCE of $acc_a (or the job did not learn)"
else
  cat "$dir.log"; fail "the job with two killed processes failed under on_failure: restart"
fi

# 3. on_failure: fail, the server killed; resumed with psctl run --resume.
dir="$TMP/b"
psctl_start "$dir" "$dir.1.log" --config "$TMP/job-fail.yaml"
kill_after_checkpoint "$dir" "$server_step" "--shard=$server_victim" "$server_delay_ms"
if ! exited_within "$psctl_pid" 60; then
  fail "the job with a killed server still runs 60 s later (on_failure: fail)"
elif ((rc == 0)); then
  fail "the job with a killed server reported success under on_failure: fail"
fi
[[ ! -f "$dir/$final/MANIFEST.json" ]] || fail "the killed job reached the final step"
if psctl_run 120 "$dir" "$dir.2.log" --config "$TMP/job-fail.yaml" --resume latest; then
  resumed_from "$dir" "$server_step" "the resumed job"
  [[ -f "$dir/$final/MANIFEST.json" ]] || fail "the resumed job wrote no final checkpoint"
  "$CHECKPOINT" inspect "$dir/ckpt" > "$TMP/inspect-b.log" 2>&1 ||
    { cat "$TMP/inspect-b.log"; fail "ps_checkpoint inspect refused the resumed job's checkpoints"; }
  acc_b=$("$REPORT" summary-get "$dir" final_accuracy)
  echo "final test accuracy: undisturbed $acc_a, killed and resumed $acc_b (tolerance $TOLERANCE)"
  within "$acc_b" "$acc_a" ||
    fail "accuracy $acc_b is not within $TOLERANCE of $acc_a (or the job did not learn)"
else
  cat "$dir.2.log"; fail "the resumed job failed"
fi

procs_finish "PASS: async job: killed server and worker restarted in-job, and a killed job resumed, both within tolerance (seed $seed)" \
  "(seed $seed)"
