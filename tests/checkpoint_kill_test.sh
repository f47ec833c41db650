#!/usr/bin/env bash
# Exact recovery after kill -9, as separate processes through psctl: a sync
# job that checkpoints every 10 steps loses a server (then, in a second run,
# a worker) to SIGKILL mid-job (psctl then fails the job and stops the rest); `psctl run --resume latest`
# in the same folder continues from the newest complete checkpoint and ends
# with a final checkpoint byte-identical to the undisturbed run's, which
# `ps_checkpoint inspect` verifies.
set -uo pipefail

ROOT="$TEST_SRCDIR/pstrain"
PSCTL="$ROOT/psctl"
BIN="$ROOT"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

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
final="ckpt/step-000000000100"

# 1. The undisturbed job.
if ! "$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --out "$TMP/a" > "$TMP/a.log" 2>&1; then
  cat "$TMP/a.log"; echo "FAIL: the undisturbed job failed"; exit 1
fi
[[ -f "$TMP/a/$final/MANIFEST.json" ]] || fail "no final checkpoint in the undisturbed run"
# The coordinator's manifest and the servers' files pass the tool's checks.
"$ROOT/tools/checkpoint/ps_checkpoint" inspect "$TMP/a/ckpt" > "$TMP/inspect.log" 2>&1 ||
  { cat "$TMP/inspect.log"; fail "ps_checkpoint inspect refused the job's checkpoints"; }
kept=$(ls -d "$TMP/a/ckpt"/step-* | wc -l)
[[ "$kept" == 3 ]] || fail "checkpoint.keep 3 left $kept checkpoints"

# 2. The same job, killed mid-job and resumed, twice: $1 names the victim
# ("server" or "worker"), $2 the step whose checkpoint must exist first.
kill_and_resume() {
  local victim="$1" after="$2" dir="$TMP/$1"
  "$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --out "$dir" > "$dir.1.log" 2>&1 &
  local psctl_pid=$! step
  step=$(printf 'step-%012d' "$after")
  for _ in $(seq 1 600); do
    [[ -f "$dir/ckpt/$step/MANIFEST.json" ]] && break
    kill -0 "$psctl_pid" 2>/dev/null || break
    sleep 0.05
  done
  # The process this test's psctl started (found by its unique token path).
  local pattern="--shard=0 --metrics_port=0 --token_file=$dir/token"
  [[ "$victim" == worker ]] && pattern="--rank=1 --metrics_port=0 --token_file=$dir/token"
  local pid
  pid=$(pgrep -f -- "$pattern" | head -1)
  if [[ -n "$pid" ]]; then
    kill -KILL "$pid"
    echo "$victim: killed pid $pid after the checkpoint of step $after"
  else
    fail "$victim: nothing to kill (the job ended before step $after was saved?)"
  fi
  if wait "$psctl_pid"; then
    fail "$victim: the job with a killed process reported success"
  fi
  [[ ! -f "$dir/$final/MANIFEST.json" ]] || fail "$victim: the killed job reached the final step"

  # Resume in the same folder from the newest complete checkpoint.
  if "$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --out "$dir" --resume latest \
      > "$dir.2.log" 2>&1; then
    grep -o "resuming from .* at step [0-9]*" "$dir/logs/coordinator.log" | head -1
    local f
    for f in shard-00000-of-00002.ckpt shard-00001-of-00002.ckpt; do
      cmp -s "$TMP/a/$final/$f" "$dir/$final/$f" ||
        fail "$victim: $f differs from the undisturbed run's"
    done
    ls "$dir"/metrics-before-resume-*.csv > /dev/null 2>&1 ||
      fail "$victim: the first attempt's metrics.csv was not kept"
  else
    cat "$dir.2.log"; fail "$victim: the resumed job failed"
  fi
}
kill_and_resume server 20
kill_and_resume worker 40

# 4. Bad input: a folder that is not there is refused by name.
out=$("$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --out "$TMP/c" \
      --resume "$TMP/nowhere" 2>&1); rc=$?
[[ $rc == 2 && "$out" == *"--resume"* ]] || fail "--resume of a missing folder: rc $rc: $out"

if ((failures)); then echo "$failures failure(s)"; exit 1; fi
echo "PASS: killed and resumed job ends bit-identical"
