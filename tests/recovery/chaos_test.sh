#!/usr/bin/env bash
# Chaos under training.on_failure: restart (docs/failures-and-recovery.md):
# a sync job that checkpoints every 5 steps loses a random server shard and
# then a random worker to SIGKILL at random steps, all drawn from a seed
# (printed; CHAOS_SEED=N replays it). `psctl run` restarts each killed
# process with the same arguments, the coordinator rolls every shard and
# worker back to the last complete checkpoint, and the job ends with final
# shard files byte-identical (cmp) to the undisturbed run's. The test also
# checks that both kills happened, that psctl restarted both processes and
# that the coordinator logged both losses and both rollbacks.
set -uo pipefail

source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # PSCTL, TMP, psctl_run, ...

chaos_seed chaos
steps=80
server_victim=$((RANDOM % 2))
worker_victim=$((RANDOM % 2))
# A kill lands 0..120 ms (up to ~5 steps) after the checkpoint of the
# step drawn: anywhere between two checkpoints.
server_step=$((5 * (2 + RANDOM % 5)))                # 10..30
worker_step=$((server_step + 5 * (2 + RANDOM % 5)))  # 20..60
server_delay_ms=$((RANDOM % 120))
worker_delay_ms=$((RANDOM % 120))
echo "plan: SIGKILL server-$server_victim ${server_delay_ms} ms after the checkpoint of step $server_step," \
  "worker-$worker_victim ${worker_delay_ms} ms after the checkpoint of step $worker_step"

# Adam on a cosine schedule: slots and the schedule step must roll back too.
# checkpoint.keep 0 keeps every manifest, which the kills are timed by.
cat > "$TMP/job.yaml" <<EOF2
job: {name: chaos, workers: 2, servers: 2}
training:
  mode: sync
  optimizer: adam
  base_lr: 0.01
  lr_schedule: cosine
  warmup_steps: 5
  local_batch: 16
  steps: $steps
  on_failure: restart
  restart_timeout_s: 20
  max_restarts: 4  # 2 kills, and room for a process starved past its lease
model: {type: mlp, input_dim: 16, hidden: [24], num_classes: 4, seed: 5}
data: {source: synthetic, seed: 9, num_features: 16, num_classes: 4, test_examples: 200}
worker: {compute_ms: 25}
server: {chunk_bytes: 256}
network: {lease_s: 2}
checkpoint: {every_steps: 5}
EOF2
final=$(ckpt_step "$steps")

# 1. The undisturbed job.
psctl_undisturbed "$TMP/calm" "$TMP/job.yaml" "$final"

# 2. The same job with two kills.
dir="$TMP/chaos"
psctl_start "$dir" "$dir.log" --config "$TMP/job.yaml"
# The second kill after the first rollback, so that both are exercised.
kill_twice "$dir" "$server_step" "--shard=$server_victim" "$server_delay_ms" \
  "$worker_step" "--rank=$worker_victim" "$worker_delay_ms"
psctl_succeeded 120 "$dir.log" "the job with two killed processes"
restarted_and_rolled_back "$dir" "$server_victim" "$worker_victim" "$((1 - worker_victim))"

# 3. Bit for bit: the final checkpoint's shard files.
if [[ -f "$dir/$final/MANIFEST.json" ]]; then
  same_files "$TMP/calm/$final" "$dir/$final" "the undisturbed run against the killed one" \
    shard-00000-of-00002.ckpt shard-00001-of-00002.ckpt
else
  fail "the job with kills has no final checkpoint"
fi
summary_succeeded "$dir" "the job with kills"

procs_finish "PASS: two SIGKILLs, two restarts, two rollbacks; final weights bit-identical (seed $seed)" \
  "(seed $seed)"
