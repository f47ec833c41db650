#!/usr/bin/env bash
# Checkpoints and resume in mode allreduce, as separate processes through
# psctl (README "Checkpoints in mode allreduce"): a 2-rank all-reduce job
# that checkpoints every 10 steps loses worker 1 to SIGKILL mid-job (psctl
# then fails the job and stops the rest); `psctl run --resume latest` in the
# same folder continues from the newest complete checkpoint and ends with a
# final checkpoint byte-identical to the undisturbed run's, and the same
# safetensors export. `ps_checkpoint inspect` verifies the checkpoints; a
# sync job refuses the all-reduce checkpoint (exit 2, nothing started).
set -uo pipefail

ROOT="$TEST_SRCDIR/pstrain"
PSCTL="$ROOT/psctl"
BIN="$ROOT"
CKPT_TOOL="$ROOT/tools/checkpoint/ps_checkpoint"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

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
final="ckpt/step-000000000080"
file="shard-00000-of-00001.ckpt"

# 1. The undisturbed job.
if ! "$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --out "$TMP/a" > "$TMP/a.log" 2>&1; then
  cat "$TMP/a.log"; echo "FAIL: the undisturbed job failed"; exit 1
fi
[[ -f "$TMP/a/$final/MANIFEST.json" ]] || fail "no final checkpoint in the undisturbed run"
"$CKPT_TOOL" inspect "$TMP/a/ckpt" > "$TMP/inspect.log" 2>&1 ||
  { cat "$TMP/inspect.log"; fail "ps_checkpoint inspect refused the job's checkpoints"; }
grep -q "mode: allreduce" "$TMP/inspect.log" || fail "inspect does not say mode allreduce"
kept=$(ls -d "$TMP/a/ckpt"/step-* | wc -l)
[[ "$kept" == 2 ]] || fail "checkpoint.keep 2 left $kept checkpoints"
grep -q "checkpoint of step 80 saved: $TMP/a/$final" "$TMP/a/logs/coordinator.log" ||
  fail "the coordinator's log does not name the final checkpoint"
"$CKPT_TOOL" export "$TMP/a/$final" --safetensors "$TMP/a.safetensors" --with_slots \
  > /dev/null 2>&1 || fail "ps_checkpoint export of the final checkpoint failed"

# 2. The same job, worker 1 killed after the checkpoint of step 20 and
# resumed in the same folder.
dir="$TMP/b"
"$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --out "$dir" > "$dir.1.log" 2>&1 &
psctl_pid=$!
for _ in $(seq 1 600); do
  [[ -f "$dir/ckpt/step-000000000020/MANIFEST.json" ]] && break
  kill -0 "$psctl_pid" 2>/dev/null || break
  sleep 0.05
done
# The process this test's psctl started (found by its unique token path).
pid=$(pgrep -f -- "--rank=1 --metrics_port=0 --token_file=$dir/token" | head -1)
if [[ -n "$pid" ]]; then
  kill -KILL "$pid"
  echo "worker 1: killed pid $pid after the checkpoint of step 20"
else
  fail "nothing to kill (the job ended before step 20 was saved?)"
fi
if wait "$psctl_pid"; then fail "the job with a killed worker reported success"; fi
[[ ! -f "$dir/$final/MANIFEST.json" ]] || fail "the killed job reached the final step"

if "$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --out "$dir" --resume latest \
    > "$dir.2.log" 2>&1; then
  grep -o "resuming from .* at step [0-9]*" "$dir/logs/coordinator.log" | head -1
  cmp -s "$TMP/a/$final/$file" "$dir/$final/$file" ||
    fail "the final $file differs from the undisturbed run's"
  "$CKPT_TOOL" export "$dir/$final" --safetensors "$TMP/b.safetensors" --with_slots \
    > /dev/null 2>&1 || fail "ps_checkpoint export of the resumed job's checkpoint failed"
  cmp -s "$TMP/a.safetensors" "$TMP/b.safetensors" ||
    fail "the exported weights differ from the undisturbed run's"
  samples=$("$ROOT/tools/report/ps_report" summary-get "$dir" samples)
  [[ "$samples" == 2560 ]] || fail "summary.json samples $samples, expected 2560 (80 steps x 32)"
else
  cat "$dir.2.log"; fail "the resumed job failed"
fi

# 3. Bad input: a sync job refuses the all-reduce checkpoint by name and
# starts nothing.
before=$(cd "$dir/ckpt" && find . -type f -exec md5sum {} + | sort)
out=$("$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --mode sync --out "$TMP/c" \
      --resume "$dir/$final" 2>&1); rc=$?
[[ $rc == 2 && "$out" == *"is a checkpoint of a job in mode allreduce, not sync"* ]] ||
  fail "a sync job resumed from an all-reduce checkpoint: rc $rc: $out"
after=$(cd "$dir/ckpt" && find . -type f -exec md5sum {} + | sort)
[[ "$before" == "$after" ]] || fail "the refused resume changed the checkpoints"

if ((failures)); then echo "$failures failure(s)"; exit 1; fi
echo "PASS: killed and resumed all-reduce job ends bit-identical"
