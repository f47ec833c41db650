#!/usr/bin/env bash
# training.on_failure: restart in mode allreduce
# (docs/failures-and-recovery.md), with real processes on loopback ephemeral
# ports:
#  1. A 3-rank job that checkpoints every 5 steps loses a seeded random
#     rank to SIGKILL a seeded random delay after a checkpoint, and after
#     that rollback another one; `psctl run` restarts each, the coordinator
#     starts a new generation, the live ranks abort the ring step they wait
#     in, every rank reloads the newest checkpoint and the ring re-forms
#     with the replacement (generations 1 and 2). The job ends with a final
#     checkpoint byte-identical (cmp) to the undisturbed run's.
#     CHAOS_SEED=N replays a draw.
#  2. SIGTERM ends a worker blocked inside a ring step (its right and left
#     neighbour SIGSTOPped, allreduce.timeout_s 60) within 1 s, cleanly.
#  3. The same in the final close after the last step: a 1-step job of 2
#     ranks whose coordinator is SIGSTOPped while they compute, so both
#     finish the step's all-reduce and block in their step report; then
#     rank 1 is SIGSTOPped and the coordinator resumed, so rank 0 reports and
#     waits in Close for rank 1 to confirm its stream (never).
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # COORD, TMP, psctl_run, ...

chaos_seed
steps=60
victims=($((RANDOM % 3)) $((RANDOM % 3)))
kill_steps=($((5 * (2 + RANDOM % 3)))) # 10..20
kill_steps+=($((kill_steps[0] + 5 * (2 + RANDOM % 3)))) # 20..40
delays_ms=($((RANDOM % 100)) $((RANDOM % 100)))
for k in 0 1; do
  echo "plan: SIGKILL worker-${victims[k]} ${delays_ms[k]} ms after the checkpoint of step ${kill_steps[k]}"
done

# Adam on a cosine schedule: slots and schedule step must come back too.
# checkpoint.keep 0 keeps every manifest, which the kill is timed by.
cat > "$TMP/job.yaml" <<EOF
job: {name: allreduce-restart, workers: 3}
training:
  mode: allreduce
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
network: {lease_s: 2}
allreduce: {timeout_s: 20}
checkpoint: {every_steps: 5}
EOF
final=$(ckpt_step "$steps")
file="shard-00000-of-00001.ckpt"

# 1a. The undisturbed job.
psctl_undisturbed "$TMP/calm" "$TMP/job.yaml" "$final"

# 1b. The same job with two kills.
dir="$TMP/kill"
psctl_start "$dir" "$dir.log" --config "$TMP/job.yaml"
# The second kill after the first rollback, so that generation 2 re-forms
# a ring that generation 1 re-formed.
kill_twice "$dir" "${kill_steps[0]}" "--rank=${victims[0]}" "${delays_ms[0]}" \
  "${kill_steps[1]}" "--rank=${victims[1]}" "${delays_ms[1]}"
psctl_succeeded 120 "$dir.log" "the job with killed ranks"
procs_cleanup
# psctl restarted each victim (once each if the same rank was drawn twice).
killed=()
for r in 0 1 2; do
  [[ " ${victims[*]} " == *" $r "* ]] && killed+=("worker-$r")
done
restarted_after_kills "$dir" 2 "${killed[@]}"
# A rank never killed re-formed the ring in-process for both generations
# (its first report of each says so; supervision.txt).
for r in 0 1 2; do
  [[ " ${victims[*]} " == *" $r "* ]] && continue
  reformed=$(noted "$dir" "resumed worker $r in generation [12] at step [0-9]+" | cut -d' ' -f6 | sort -u | wc -l)
  ((reformed == 2)) || fail "the live worker-$r re-formed the ring in $reformed generations in-process, expected 2: $(cat "$dir/supervision.txt" 2>&1)"
done
if [[ -f "$dir/$final/MANIFEST.json" ]]; then
  same_files "$TMP/calm/$final" "$dir/$final" "the undisturbed run against the killed one" "$file"
else
  fail "the job with kills has no final checkpoint"
fi
summary_succeeded "$dir" "the job with kills"

# sigterm_ends_worker0 WHERE: SIGTERM to workers[0], which must end within
# 1 s with status 0 (it is waited for up to 5 s); an "ok" line, or a FAIL
# and its log's tail. WHERE says where it was waiting.
sigterm_ends_worker0() {
  local t0 took
  t0=$(now_ms)
  kill -TERM "${workers[0]}"
  rc=-1
  exited_within "${workers[0]}" 5
  took=$(($(now_ms) - t0))
  if ((took <= 1000 && rc == 0)); then
    ok "worker 0 ended ${took} ms after SIGTERM $1, status 0"
  else
    tail -5 "$dir/worker-0.log"
    fail "worker 0 after SIGTERM $1: status $rc after ${took} ms (want 0 within 1000 ms)"
  fi
}

# 2. SIGTERM inside a ring step: ranks 1 and 2 stopped, rank 0 waits in the
# ring (allreduce.timeout_s 60, lease 30: nothing else would end the wait).
dir="$TMP/sigterm"
cat > "$TMP/term.yaml" <<EOF
job: {name: allreduce-sigterm, workers: 3}
training: {mode: allreduce, steps: 100000, local_batch: 8}
model: {type: mlp, input_dim: 8, hidden: [8], num_classes: 2, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 2, seed: 3}
network: {lease_s: 30}
allreduce: {timeout_s: 60}
EOF
if start_coordinator "$dir" "$TMP/term.yaml"; then
  start_workers "$dir" 3 --peer_port=0 --advertise_host=127.0.0.1
  wait_steps "$dir" 20 60
  kill -STOP "${workers[1]}" "${workers[2]}"
  sleep 0.5 # rank 0 is now blocked in a ring receive
  sigterm_ends_worker0 "inside a ring step"
  # user-facing message check: the log says what the SIGTERM cancelled.
  grep -q "cancelled while waiting for" "$dir/worker-0.log" ||
    fail "worker 0's log does not say the ring wait was cancelled"
  kill -KILL "${workers[1]}" "${workers[2]}" 2>/dev/null
fi
procs_cleanup

# 3. SIGTERM in the final close. Each stage waits for what the next needs, so
# rank 0 is in Close when SIGTERM comes (or enters it with SIGTERM already
# seen: the same CANCELLED). worker.compute_ms 8000 is the window to stop the
# coordinator in once both ranks have their peers (3000 was missed on a
# loaded machine: both reported step 0 and closed before it stopped).
dir="$TMP/sigterm_close"
cat > "$TMP/close.yaml" <<EOF
job: {name: allreduce-sigterm-close, workers: 2}
training: {mode: allreduce, steps: 1, local_batch: 8}
model: {type: mlp, input_dim: 8, hidden: [8], num_classes: 2, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 2, seed: 3}
worker: {compute_ms: 8000}
network: {lease_s: 30}
allreduce: {timeout_s: 60}
EOF
# steps_of LOG: sets worker_steps to the steps completed by the worker
# logging to LOG, from its metrics endpoint (empty before it serves one).
# It is polled, so it forks nothing (see procs.sh): bash's regex and
# /dev/tcp, each read bounded by 2 s.
steps_of() {
  local line port="" fd
  worker_steps=""
  [[ -f "$1" ]] || return 0
  while IFS= read -r line; do
    if [[ "$line" =~ metrics\ at\ http://127\.0\.0\.1:([0-9]+)/metrics ]]; then
      port=${BASH_REMATCH[1]}
      break
    fi
  done < "$1"
  [[ -n "$port" ]] || return 0
  { exec {fd}<> "/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 0
  printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&"$fd"
  while IFS= read -r -t 2 -u "$fd" line; do
    [[ "$line" =~ ^pstrain_worker_steps_total\ ([0-9]+) ]] && worker_steps=${BASH_REMATCH[1]}
  done
  exec {fd}<&-
  return 0
}
# The stages' conditions: both ranks have their peers; both all-reduced
# step 0 (and wait on their report).
both_have_peers() {
  file_has "$dir/worker-0.log" "all-reduce: ring" && file_has "$dir/worker-1.log" "all-reduce: ring"
}
both_did_step_0() {
  steps_of "$dir/worker-0.log"
  [[ "$worker_steps" == 1 ]] || return 1
  steps_of "$dir/worker-1.log"
  [[ "$worker_steps" == 1 ]]
}
if start_coordinator "$dir" "$TMP/close.yaml"; then
  start_workers "$dir" 2 --peer_port=0 --advertise_host=127.0.0.1 --metrics_port=0
  stage="no peers"
  wait_for 30 "both ranks' peers" both_have_peers && stage="peers"
  kill -STOP "$coord"
  # Too late once rank 0 closes: its report of step 0 went through.
  file_has "$dir/worker-0.log" "closing the ring" &&
    stage="peers, but step 0 was reported before the coordinator stopped"
  [[ "$stage" == peers ]] &&
    wait_for 30 "step 0 all-reduced on both ranks" both_did_step_0 && stage="reporting"
  kill -STOP "${workers[1]}"
  kill -CONT "$coord"
  # Rank 0's report returns and it closes its stream to rank 1 (it says so).
  if [[ "$stage" == reporting ]]; then
    wait_for 30 "'closing the ring' in $dir/worker-0.log" \
      file_has "$dir/worker-0.log" "closing the ring" && stage="closing"
  fi
  if [[ "$stage" != closing ]] || ! running "${workers[0]}"; then
    tail -5 "$dir/worker-0.log"
    fail "the final-close case did not set up (reached: $stage; worker 0 running: $(running "${workers[0]}" && echo yes || echo no))"
  else
    sigterm_ends_worker0 "in its final close"
    # Log check: no file records that a worker finished its final close.
    if grep -qE " done$" "$dir/worker-0.log"; then
      # Rank 1 confirmed the close before its SIGSTOP took (seen about once
      # in six runs): worker 0 finished its close before SIGTERM, so there
      # was no close to cancel. It must still have ended within 1 s (above:
      # its ring server's grace for rank 1's stream honours SIGTERM).
      echo "note: worker 0's final close completed before SIGTERM arrived; the cancellation was not exercised this run (seed $seed)"
    else
      # user-facing message check, as above.
      grep -q "cancelled while waiting for the neighbour to confirm the last segments" "$dir/worker-0.log" ||
        fail "worker 0's log does not say its final close was cancelled"
    fi
  fi
  kill -KILL "${workers[1]}" 2>/dev/null
fi

procs_finish "PASS: two killed ranks restarted, ring re-formed twice, final weights bit-identical; SIGTERM in a ring step and in the final close ends the worker within 1 s (seed $seed)" \
  "(seed $seed)"
