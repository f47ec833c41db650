#!/usr/bin/env bash
# training.on_failure: elastic in mode sync with real processes
# (docs/failures-and-recovery.md, "Elastic workers"): a coordinator, 2 ps_server
# and 2 ps_worker processes on loopback ephemeral ports, network.lease_s = 1, a
# final checkpoint.
#  1. The undisturbed job.
#  2. The same job with worker 1 SIGSTOPped mid-job: it is declared dead
#     after the lease, worker 0 stands in for rank 1 (registers for it with
#     a new session and computes its micro-batches beside its own from the
#     step whose weights it holds), the job completes with every step a
#     row, and the final shard files are byte-identical (cmp) to the
#     undisturbed run's: the global batch was kept and no step was summed
#     twice or lost, whatever worker 1 had pushed to which shard.
#  3. The stopped worker, continued, is refused (its session ended) and
#     exits non-zero without failing the job.
set -uo pipefail

source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # REPORT, TMP, run_job, ...

STEPS=150
cat > "$TMP/job.yaml" <<YAML
job: {name: elastic-sync, workers: 2, servers: 2}
training: {mode: sync, steps: $STEPS, local_batch: 8, optimizer: adam, base_lr: 0.01, on_failure: elastic}
model: {type: mlp, input_dim: 8, hidden: [16], num_classes: 3, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 3, seed: 3, test_examples: 100}
worker: {compute_ms: 8}
server: {chunk_bytes: 256}
network: {lease_s: 1, barrier_timeout_s: 30, rpc_timeout_s: 10}
checkpoint: {every_steps: $STEPS}
YAML
final=$(ckpt_step "$STEPS")

# 1. The undisturbed job.
calm="$TMP/calm"
run_job "$calm" "$TMP/job.yaml" 30 || exit 1
[[ -f "$calm/$final/MANIFEST.json" ]] || { fail "no final checkpoint in the undisturbed run"; exit 1; }

# 2. Worker 1 stopped after a random number of steps.
dir="$TMP/stopped"
start_job "$dir" "$TMP/job.yaml" || exit 1
stop_after=$((10 + $(date +%N | sed 's/^0*//') % 40))
wait_steps "$dir" "$stop_after"
kill -STOP "${workers[1]}"
echo "worker 1 stopped after about $stop_after steps"
wait_for 10 "the takeover in $dir/supervision.txt" \
  has_note "$dir" "taken over worker 1 from step [0-9]+ by worker 0"
# 3. Continued once it has been replaced: refused everywhere.
kill -CONT "${workers[1]}"
if exited_within "${workers[1]}" 10; then
  # user-facing message check (shown, not checked): why it was refused.
  ((rc != 0)) && ok "the continued worker 1 was refused (exit $rc): $(grep -o "session[^;]*" "$dir/worker-1.log" | tail -1)" ||
    fail "the continued worker 1 exited 0: $(tail -2 "$dir/worker-1.log")"
else
  fail "the continued worker 1 still runs 10 s later"
fi
if exited_within "$coord" 30; then
  ((rc == 0)) && ok "the job completed (exit 0)" ||
    fail "coordinator exited $rc: $(tail -3 "$dir/coordinator.log")"
else
  fail "the job did not complete within 30 s"
fi
# The coordinator's notes (supervision.txt): worker 1's death and its
# rank's takeover by the live worker 0 (the stand-in names itself).
has_note "$dir" "dead worker 1" &&
  ok "worker 1 declared dead after the lease" ||
  fail "supervision.txt notes no death of worker 1: $(cat "$dir/supervision.txt" 2>&1)"
line=$(noted "$dir" "taken over worker 1 from step [0-9]+ by worker 0" | head -1)
[[ -n "$line" ]] && ok "supervision.txt: $line" ||
  fail "supervision.txt notes no takeover by worker 0: $(cat "$dir/supervision.txt" 2>&1)"
summary_ok "$dir" "$STEPS"
exited_within "${workers[0]}" 5 && ((rc == 0)) && ok "worker 0 finished (exit 0)" ||
  fail "worker 0: rc ${rc:-?}: $(tail -2 "$dir/worker-0.log")"
# Bit for bit: the final checkpoint's shard files.
if [[ -f "$dir/$final/MANIFEST.json" ]]; then
  before=$failures
  same_files "$calm/$final" "$dir/$final" "the undisturbed run against the stopped one" \
    shard-00000-of-00002.ckpt shard-00001-of-00002.ckpt
  ((failures == before)) && ok "final shard files byte-identical to the undisturbed run's"
else
  fail "the job with the stopped worker has no final checkpoint"
fi

if ((failures)); then
  echo "--- coordinator"; tail -20 "$dir/coordinator.log"
  echo "--- worker 0"; tail -20 "$dir/worker-0.log"
  echo "--- worker 1"; tail -10 "$dir/worker-1.log"
fi
procs_finish "PASS"
