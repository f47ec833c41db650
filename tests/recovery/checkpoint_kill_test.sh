#!/usr/bin/env bash
# Exact recovery after kill -9, as separate processes through psctl: a sync
# job that checkpoints every 10 steps loses a server (then, in a second run,
# a worker) to SIGKILL mid-job (psctl then fails the job and stops the rest); `psctl run --resume latest`
# in the same folder continues from the newest complete checkpoint and ends
# with a final checkpoint byte-identical to the undisturbed run's, which
# `ps_checkpoint inspect` verifies.
set -uo pipefail

source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # COORD, TMP, psctl_run, ...

# Adam on a cosine schedule (slots and schedule step must be restored);
# 20 ms of emulated compute per step, so the kill lands mid-job.
cat > "$TMP/job.yaml" <<'EOF'
job: {name: kill-resume, workers: 2, servers: 2}
training:
  mode: sync
  optimizer: adam
  base_lr: 0.01
  lr_schedule: cosine
  warmup_steps: 5
  local_batch: 16
  steps: 100
model: {type: mlp, input_dim: 16, hidden: [24], num_classes: 4, seed: 5}
data: {source: synthetic, seed: 9, num_features: 16, num_classes: 4, test_examples: 200}
worker: {compute_ms: 20}
server: {chunk_bytes: 256}
checkpoint: {every_steps: 10, keep: 3}
EOF
final=$(ckpt_step 100)

# 1. The undisturbed job.
psctl_undisturbed "$TMP/a" "$TMP/job.yaml" "$final"
# The coordinator's manifest and the servers' files pass the tool's checks.
"$CHECKPOINT" inspect "$TMP/a/ckpt" > "$TMP/inspect.log" 2>&1 ||
  { cat "$TMP/inspect.log"; fail "ps_checkpoint inspect refused the job's checkpoints"; }
kept=$(ls -d "$TMP/a/ckpt"/step-* | wc -l)
[[ "$kept" == 3 ]] || fail "checkpoint.keep 3 left $kept checkpoints"

# 2. The same job, killed mid-job and resumed, twice: $1 names the victim
# ("server" or "worker"), $2 the step whose checkpoint must exist first.
kill_and_resume() {
  local victim="$1" after="$2" dir="$TMP/$1"
  psctl_start "$dir" "$dir.1.log" --config "$TMP/job.yaml"
  # The process this test's psctl started (found by its unique token path).
  local who="--shard=0"
  [[ "$victim" == worker ]] && who="--rank=1"
  kill_after_checkpoint "$dir" "$after" "$who"
  if ! exited_within "$psctl_pid" 60; then
    fail "$victim: the job with a killed process still runs 60 s later"
  elif ((rc == 0)); then
    fail "$victim: the job with a killed process reported success"
  fi
  [[ ! -f "$dir/$final/MANIFEST.json" ]] || fail "$victim: the killed job reached the final step"
  # The time the first attempt recorded (to its last reported step: 0 when
  # the workers' first report, every 0.5 s, had not come yet).
  local earlier
  earlier=$("$REPORT" summary-get "$dir" wall_s) ||
    fail "$victim: the killed job left no summary.json with wall_s"

  # Resume in the same folder from the newest complete checkpoint.
  if psctl_run 120 "$dir" "$dir.2.log" --config "$TMP/job.yaml" --resume latest; then
    resumed_from "$dir" "$after" "$victim"
    same_files "$TMP/a/$final" "$dir/$final" "$victim" \
      shard-00000-of-00002.ckpt shard-00001-of-00002.ckpt
    ls "$dir"/metrics-before-resume-*.csv > /dev/null 2>&1 ||
      fail "$victim: the first attempt's metrics.csv was not kept"
    # The summary counts the whole job: every step's global batch (2 x 16),
    # and the earlier part's recorded time on top of this part's.
    local samples wall last_wall
    samples=$("$REPORT" summary-get "$dir" samples)
    wall=$("$REPORT" summary-get "$dir" wall_s)
    # This part's time to its last training step (step 99; the row of step
    # 100 is the final evaluation, which summary.json's wall_s leaves out).
    last_wall=$(awk -F, '$1 == 99 { print $2 }' "$dir/metrics.csv")  # step,wall_s,...
    [[ "$samples" == 3200 ]] || fail "$victim: summary.json samples $samples, expected 3200 (100 steps x 32)"
    [[ -n "$last_wall" ]] || fail "$victim: metrics.csv has no row for step 99"
    awk -v a="$wall" -v b="${last_wall:-inf}" -v e="${earlier:-inf}" \
      'BEGIN { d = a - (b + e); exit !(d < 1e-6 && d > -1e-6) }' ||
      fail "$victim: summary.json wall_s $wall is not the earlier part's $earlier s plus this part's $last_wall s"
  else
    cat "$dir.2.log"; fail "$victim: the resumed job failed"
  fi
}
kill_and_resume server 20
kill_and_resume worker 40

# 3. The dry run shows where --resume would start (and refuses a bad one).
plan=$("$COORD" --config="$TMP/job.yaml" --out="$TMP/server" \
       --resume=latest --dry_run 2>&1)
[[ "$plan" == *"# resume: step "*" from $TMP/server/ckpt/step-"* ]] ||
  fail "--dry_run --resume latest does not show the resume point: $plan"
"$COORD" --config="$TMP/job.yaml" --resume="$TMP/nowhere" \
  --dry_run > /dev/null 2>&1
rc=$?
[[ $rc == 2 ]] || fail "--dry_run with a missing --resume folder: rc $rc, expected 2"

# 4. Bad input: a folder that is not there is refused by name.
psctl_run 60 "$TMP/c" "$TMP/c.log" --config "$TMP/job.yaml" --resume "$TMP/nowhere"
rc=$?
out=$(cat "$TMP/c.log")
[[ $rc == 2 && "$out" == *"--resume"* ]] || fail "--resume of a missing folder: rc $rc: $out"

procs_finish "PASS: killed and resumed job ends bit-identical"
