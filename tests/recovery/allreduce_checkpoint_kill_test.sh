#!/usr/bin/env bash
# Checkpoints and resume in mode allreduce, as separate processes through psctl
# (docs/checkpoints.md, "Checkpoints in mode allreduce"): a 2-rank all-reduce
# job that checkpoints every 10 steps loses worker 1 to SIGKILL mid-job (psctl
# then fails the job and stops the rest); `psctl run --resume latest` in the
# same folder continues from the newest complete checkpoint and ends with a
# final checkpoint byte-identical to the undisturbed run's, and the same
# safetensors export. `ps_checkpoint inspect` verifies the checkpoints; a sync
# job refuses the all-reduce checkpoint (exit 2, nothing started).
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # CHECKPOINT, TMP, psctl_run, ...

# Adam on a cosine schedule (slots and schedule step must be restored);
# 20 ms of emulated compute per step, so the kill lands mid-job; a short
# lease so the lost rank is noticed quickly.
cat > "$TMP/job.yaml" <<'EOF'
job: {name: allreduce-kill-resume, workers: 2}
training:
  mode: allreduce
  optimizer: adam
  base_lr: 0.01
  lr_schedule: cosine
  warmup_steps: 5
  local_batch: 16
  steps: 80
model: {type: mlp, input_dim: 16, hidden: [24], num_classes: 4, seed: 5}
data: {source: synthetic, seed: 9, num_features: 16, num_classes: 4, test_examples: 200}
worker: {compute_ms: 20}
network: {lease_s: 2}
allreduce: {timeout_s: 10}
checkpoint: {every_steps: 10, keep: 2}
EOF
final=$(ckpt_step 80)
file="shard-00000-of-00001.ckpt"

# 1. The undisturbed job.
psctl_undisturbed "$TMP/a" "$TMP/job.yaml" "$final"
"$CHECKPOINT" inspect "$TMP/a/ckpt" > "$TMP/inspect.log" 2>&1 ||
  { cat "$TMP/inspect.log"; fail "ps_checkpoint inspect refused the job's checkpoints"; }
# user-facing message check: what inspect prints.
grep -q "mode: allreduce" "$TMP/inspect.log" || fail "inspect does not say mode allreduce"
kept=$(ls -d "$TMP/a/ckpt"/step-* | wc -l)
[[ "$kept" == 2 ]] || fail "checkpoint.keep 2 left $kept checkpoints"
# The coordinator noted the final checkpoint (rank 0's report) by its path.
has_note_line "$TMP/a" "saved checkpoint of step 80 in $TMP/a/$final" ||
  fail "supervision.txt does not note the final checkpoint: '$(noted "$TMP/a" "saved .*" | tail -1)'"
"$CHECKPOINT" export "$TMP/a/$final" --safetensors "$TMP/a.safetensors" --with_slots \
  > /dev/null 2>&1 || fail "ps_checkpoint export of the final checkpoint failed"

# 2. The same job, worker 1 killed after the checkpoint of step 20 and
# resumed in the same folder.
dir="$TMP/b"
psctl_start "$dir" "$dir.1.log" --config "$TMP/job.yaml"
kill_after_checkpoint "$dir" 20 --rank=1
if ! exited_within "$psctl_pid" 60; then
  fail "the job with a killed worker still runs 60 s later"
elif ((rc == 0)); then
  fail "the job with a killed worker reported success"
fi
[[ ! -f "$dir/$final/MANIFEST.json" ]] || fail "the killed job reached the final step"

if psctl_run 120 "$dir" "$dir.2.log" --config "$TMP/job.yaml" --resume latest; then
  resumed_from "$dir" 20 "the resumed job"
  same_files "$TMP/a/$final" "$dir/$final" "the resumed job" "$file"
  "$CHECKPOINT" export "$dir/$final" --safetensors "$TMP/b.safetensors" --with_slots \
    > /dev/null 2>&1 || fail "ps_checkpoint export of the resumed job's checkpoint failed"
  cmp -s "$TMP/a.safetensors" "$TMP/b.safetensors" ||
    fail "the exported weights differ from the undisturbed run's"
  samples=$("$REPORT" summary-get "$dir" samples)
  [[ "$samples" == 2560 ]] || fail "summary.json samples $samples, expected 2560 (80 steps x 32)"
else
  cat "$dir.2.log"; fail "the resumed job failed"
fi

# 3. Bad input: a sync job refuses the all-reduce checkpoint by name and
# starts nothing.
before=$(cd "$dir/ckpt" && find . -type f -exec md5sum {} + | sort)
psctl_run 60 "$TMP/c" "$TMP/c.log" --config "$TMP/job.yaml" --mode sync \
  --resume "$dir/$final"
out=$(cat "$TMP/c.log")
[[ $rc == 2 && "$out" == *"is a checkpoint of a job in mode allreduce, not sync"* ]] ||
  fail "a sync job resumed from an all-reduce checkpoint: rc $rc: $out"
after=$(cd "$dir/ckpt" && find . -type f -exec md5sum {} + | sort)
[[ "$before" == "$after" ]] || fail "the refused resume changed the checkpoints"

procs_finish "PASS: killed and resumed all-reduce job ends bit-identical"
