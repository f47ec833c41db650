#!/usr/bin/env bash
# training.on_failure: elastic in mode sync with real processes, the cases
# tests/recovery/elastic_sync_test.sh (a SIGSTOPped worker) leaves out
# (docs/failures-and-recovery.md, "Elastic workers"): a coordinator, 2 ps_server
# and 2 or 3 ps_worker processes on loopback ephemeral ports,
# network.lease_s = 1.5, a final checkpoint.
#  1. Handover: worker 1 is SIGKILLed after a random number of steps,
#     declared dead and stood in for by worker 0; then a fresh ps_worker is
#     started for rank 1. Its registration waits until worker 0 releases the
#     rank between two steps, and it starts at the first step worker 0 did
#     not push. The job completes and the final shard files are
#     byte-identical (cmp) to the undisturbed run's.
#  2. A stand-in that dies: 3 workers; worker 2 is SIGKILLed and taken over
#     by worker 0, then worker 0 is SIGKILLed too: worker 1 takes both
#     ranks over, and the final shard files equal the undisturbed 3-worker
#     run's.
#  3. The same with training.min_workers = 2: the second death fails the
#     job and summary.json names worker 0.
set -uo pipefail

source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # REPORT, TMP, run_job, ...

random() { echo $(( $(date +%N | sed 's/^0*//') % $1 )); }

STEPS=120
final=$(ckpt_step "$STEPS")
write_config() {  # FILE WORKERS MIN_WORKERS
  cat > "$1" <<YAML
job: {name: elastic-handover, workers: $2, servers: 2}
training: {mode: sync, steps: $STEPS, local_batch: 8, optimizer: adam, base_lr: 0.01, on_failure: elastic, min_workers: $3}
model: {type: mlp, input_dim: 8, hidden: [16], num_classes: 3, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 3, seed: 3, test_examples: 100}
worker: {compute_ms: 8}
server: {chunk_bytes: 256}
network: {lease_s: 1.5, barrier_timeout_s: 30, rpc_timeout_s: 10}
checkpoint: {every_steps: $STEPS}
YAML
}

rows() { wc -l < "$1/metrics.csv" 2>/dev/null || echo 0; }

calm_run() {  # DIR CONFIG WORKERS
  run_job "$1" "$2" 40 2 "$3" || return 1
  [[ -f "$1/$final/MANIFEST.json" ]] || { fail "no final checkpoint in $1"; return 1; }
}

completed_identical() {  # DIR CALM_DIR WHAT
  local dir="$1" calm="$2" what="$3" before
  if exited_within "$coord" 40; then
    ((rc == 0)) && ok "$what: the job completed (exit 0)" ||
      fail "$what: coordinator exited $rc: $(tail -3 "$dir/coordinator.log")"
  else
    fail "$what: the job did not complete within 40 s"
  fi
  local steps
  steps=$("$REPORT" summary-get "$dir" steps 2>&1)
  [[ "$steps" == "$STEPS" ]] && ok "$what: summary.json has all $STEPS steps" ||
    fail "$what: summary.json steps = '$steps', want $STEPS"
  if [[ -f "$dir/$final/MANIFEST.json" ]]; then
    before=$failures
    same_files "$calm/$final" "$dir/$final" "$what" \
      shard-00000-of-00002.ckpt shard-00001-of-00002.ckpt
    ((failures == before)) && ok "$what: final shard files byte-identical to the undisturbed run's"
  else
    fail "$what: no final checkpoint"
  fi
}

show_logs() {  # DIR
  echo "--- $1: coordinator"; tail -25 "$1/coordinator.log"
  for f in "$1"/worker-*.log; do echo "--- $f"; tail -8 "$f"; done
}

# 1. Handover to a new worker after a SIGKILL.
write_config "$TMP/two.yaml" 2 1
calm2="$TMP/calm2"
calm_run "$calm2" "$TMP/two.yaml" 2 || { show_logs "$calm2"; exit 1; }
dir="$TMP/handover"
start_job "$dir" "$TMP/two.yaml" || exit 1
kill_after=$((10 + $(random 20)))
wait_steps "$dir" "$kill_after"
kill -KILL "${workers[1]}"
echo "worker 1 killed after about $kill_after steps"
# The coordinator's notes (supervision.txt) record the takeover, the
# stand-in's release and the new worker's rejoin.
if wait_for 10 "the takeover of rank 1" \
  has_note "$dir" "taken over worker 1 from step [0-9]+ by worker 0"; then
  ok "supervision.txt: $(noted "$dir" "taken over worker 1 from step [0-9]+ by worker 0" | head -1)"
else
  fail "worker 0 did not take rank 1 over"
fi
spawn "$dir/worker-1-new.log" "$WORKER" --coordinator="$addr" --rank=1 \
  --token_file="$JOB_TOKEN"
newcomer=$spawned
completed_identical "$dir" "$calm2" "handover"
released=$(noted "$dir" "released worker 1 before step [0-9]+")
[[ -n "$released" ]] && ok "supervision.txt: $released" ||
  fail "supervision.txt notes no release of rank 1: $(cat "$dir/supervision.txt" 2>&1)"
joined=$(noted "$dir" "rejoined worker 1 from step [0-9]+")
[[ -n "$joined" ]] && ok "supervision.txt: $joined" ||
  fail "supervision.txt notes no rejoin of rank 1: $(tail -3 "$dir/worker-1-new.log")"
[[ -n "$released" && "${released##* }" == "${joined##* }" ]] &&
  ok "the new worker starts where the stand-in stopped (step ${joined##* })" ||
  fail "stand-in stopped at '${released##* }', new worker started at '${joined##* }'"
exited_within "$newcomer" 5 && ((rc == 0)) && ok "the new worker finished (exit 0)" ||
  fail "the new worker: rc ${rc:-?}: $(tail -2 "$dir/worker-1-new.log")"
exited_within "${workers[0]}" 5 && ((rc == 0)) && ok "worker 0 finished (exit 0)" ||
  fail "worker 0: rc ${rc:-?}"
((failures)) && show_logs "$dir"

# 2. The stand-in dies too.
write_config "$TMP/three.yaml" 3 1
calm3="$TMP/calm3"
calm_run "$calm3" "$TMP/three.yaml" 3 || { show_logs "$calm3"; exit 1; }
before=$failures
stand_in_dies() {  # DIR CONFIG
  local dir="$1"
  start_job "$dir" "$2" 2 3 || return 1
  wait_steps "$dir" $((10 + $(random 20)))
  kill -KILL "${workers[2]}"
  if wait_for 10 "the takeover of rank 2" \
    has_note "$dir" "taken over worker 2 from step [0-9]+ by worker 0"; then
    ok "supervision.txt: $(noted "$dir" "taken over worker 2 from step [0-9]+ by worker 0" | head -1)"
  else
    fail "rank 2 was not taken over"
  fi
  wait_steps "$dir" $(($(rows "$dir") + 5 + $(random 20)))
  kill -KILL "${workers[0]}"
  echo "stand-in worker 0 killed after about $(rows "$dir") steps"
}
dir="$TMP/standin"
stand_in_dies "$dir" "$TMP/three.yaml"
completed_identical "$dir" "$calm3" "stand-in died"
# Rank 2 by worker 0, then, worker 0 dead, both ranks by worker 1.
n0=$(noted "$dir" "taken over worker 0 from step [0-9]+ by worker 1" | wc -l)
n2=$(noted "$dir" "taken over worker 2 from step [0-9]+ by worker [0-9]+" | wc -l)
by1=$(noted "$dir" "taken over worker 2 from step [0-9]+ by worker [0-9]+" | tail -1)
((n0 == 1 && n2 == 2)) && [[ "$by1" == *" by worker 1" ]] &&
  ok "worker 1 stands in for ranks 0 and 2 after the stand-in died ($by1)" ||
  fail "takeovers: rank 0 by worker 1 $n0 time(s), rank 2 $n2 (want 1 and 2), last '$by1': $(cat "$dir/supervision.txt" 2>&1)"
exited_within "${workers[1]}" 5 && ((rc == 0)) && ok "worker 1 finished (exit 0)" ||
  fail "worker 1: rc ${rc:-?}"
((failures > before)) && show_logs "$dir"

# 3. min_workers = 2: the stand-in's death fails the job, naming it.
write_config "$TMP/strict.yaml" 3 2
dir="$TMP/strict"
stand_in_dies "$dir" "$TMP/strict.yaml"
if exited_within "$coord" 20; then
  ((rc != 0)) && ok "the job failed (exit $rc)" || fail "the job succeeded"
else
  fail "the job did not end within 20 s"
fi
failure=$("$REPORT" failure "$dir" 2>&1)
[[ "$failure" == *"worker 0"* && "$failure" == *"training.min_workers = 2"* ]] &&
  ok "summary.json: $failure" || fail "summary.json failure: '$failure'"

procs_finish "PASS"
