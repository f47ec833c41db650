#!/usr/bin/env bash
# training.on_failure: restart in mode allreduce (README "Failures and
# recovery"), with real processes on loopback ephemeral ports:
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

ROOT="$TEST_SRCDIR/pstrain"
PSCTL="$ROOT/psctl"
BIN="$ROOT"
COORD="$ROOT/coordinator/ps_coordinator"
WORKER="$ROOT/worker/ps_worker"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0
pids=()
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup EXIT
now_ms() { date +%s%3N; }
# running_pid PID: alive and not a zombie (exited, not yet waited for).
running_pid() { kill -0 "$1" 2>/dev/null && [[ "$(ps -o stat= -p "$1" 2>/dev/null)" != Z* ]]; }

seed="${CHAOS_SEED:-$(($(date +%s%N) % 100000))}"
echo "seed $seed (replay: CHAOS_SEED=$seed)"
RANDOM=$seed
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
final=$(printf 'ckpt/step-%012d' "$steps")
file="shard-00000-of-00001.ckpt"

# 1a. The undisturbed job.
if ! "$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --out "$TMP/calm" > "$TMP/calm.log" 2>&1; then
  cat "$TMP/calm.log"
  echo "FAIL: the undisturbed job failed"
  exit 1
fi
[[ -f "$TMP/calm/$final/MANIFEST.json" ]] || fail "no final checkpoint in the undisturbed run"

# 1b. The same job with two kills.
dir="$TMP/kill"
"$PSCTL" run --bin "$BIN" --config "$TMP/job.yaml" --out "$dir" > "$dir.log" 2>&1 &
psctl_pid=$!
# Kills the process psctl started for rank $1 $3 ms after the checkpoint of
# step $2 is complete.
kill_after() {
  local victim="$1" step="$2" delay_ms="$3" pid="" manifest
  manifest="$dir/$(printf 'ckpt/step-%012d' "$step")/MANIFEST.json"
  for _ in $(seq 1 1500); do
    [[ -f "$manifest" ]] && break
    kill -0 "$psctl_pid" 2>/dev/null || break
    sleep 0.02
  done
  sleep "$(printf '0.%03d' "$delay_ms")"
  # The process this test's psctl started (found by its unique token path).
  pid=$(pgrep -f -- "--rank=$victim --metrics_port=0 --token_file=$dir/token" | head -1)
  if [[ -n "$pid" && -f "$manifest" ]] && kill -0 "$psctl_pid" 2>/dev/null; then
    kill -KILL "$pid"
    echo "killed worker-$victim (pid $pid) ${delay_ms} ms after the checkpoint of step $step"
    return 0
  fi
  fail "worker-$victim: not killed (the job ended or stalled before the checkpoint of step $step)"
}
kill_after "${victims[0]}" "${kill_steps[0]}" "${delays_ms[0]}"
# The second kill after the first rollback, so that generation 2 re-forms
# a ring that generation 1 re-formed.
for _ in $(seq 1 1000); do
  grep -q "rolled back to step" "$dir/logs/coordinator.log" 2>/dev/null && break
  kill -0 "$psctl_pid" 2>/dev/null || break
  sleep 0.02
done
kill_after "${victims[1]}" "${kill_steps[1]}" "${delays_ms[1]}"
if ! wait "$psctl_pid"; then
  cat "$dir.log"
  fail "the job with killed ranks failed"
fi
for victim in $(printf '%s\n' "${victims[@]}" | sort -u); do
  grep -q "^psctl: worker-$victim (pid [0-9]*) exited with status 137; restarted as pid" "$dir.log" ||
    fail "psctl did not restart the killed worker-$victim"
done
lost=$(grep -c " lost (" "$dir/logs/coordinator.log")
rolled=$(grep -c "rolled back to step" "$dir/logs/coordinator.log")
((lost >= 2)) || fail "the coordinator logged $lost losses, expected 2"
((rolled >= 2)) || fail "the coordinator logged $rolled rollbacks, expected 2"
grep -E " lost \(|rolled back to step" "$dir/logs/coordinator.log" | sed 's/^/  /'
# A rank never killed re-formed the ring in-process for both generations.
for r in 0 1 2; do
  [[ " ${victims[*]} " == *" $r "* ]] && continue
  reformed=$(grep -c "re-forming the ring: resuming at step" "$dir/logs/worker-$r.log")
  ((reformed >= 2)) || fail "the live worker-$r re-formed the ring $reformed times in-process, expected 2"
done
if [[ -f "$dir/$final/MANIFEST.json" ]]; then
  cmp -s "$TMP/calm/$final/$file" "$dir/$final/$file" ||
    fail "the final $file differs from the undisturbed run's"
else
  fail "the job with kills has no final checkpoint"
fi
grep -q '"failed": false' "$dir/summary.json" || fail "summary.json does not record success"

# 2. SIGTERM inside a ring step: ranks 1 and 2 stopped, rank 0 waits in the
# ring (allreduce.timeout_s 60, lease 30: nothing else would end the wait).
dir="$TMP/sigterm"
mkdir -p "$dir"
cat > "$TMP/term.yaml" <<EOF
job: {name: allreduce-sigterm, workers: 3}
training: {mode: allreduce, steps: 100000, local_batch: 8}
model: {type: mlp, input_dim: 8, hidden: [8], num_classes: 2, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 2, seed: 3}
network: {lease_s: 30}
allreduce: {timeout_s: 60}
EOF
"$COORD" --config="$TMP/term.yaml" --port=0 --port_file="$dir/port" --out="$dir" \
  --quiet 2> "$dir/coordinator.log" &
pids+=($!)
for _ in $(seq 1 200); do [[ -s "$dir/port" ]] && break; sleep 0.05; done
workers=()
for r in 0 1 2; do
  "$WORKER" --coordinator="127.0.0.1:$(cat "$dir/port")" --rank="$r" \
    --peer_port=0 --advertise_host=127.0.0.1 2> "$dir/worker-$r.log" &
  workers+=($!)
  pids+=($!)
done
for _ in $(seq 1 400); do
  (($(wc -l < "$dir/metrics.csv" 2>/dev/null || echo 0) > 20)) && break
  sleep 0.05
done
kill -STOP "${workers[1]}" "${workers[2]}"
sleep 0.5 # rank 0 is now blocked in a ring receive
t0=$(now_ms)
kill -TERM "${workers[0]}"
rc=-1
while kill -0 "${workers[0]}" 2>/dev/null; do
  (($(now_ms) - t0 > 5000)) && break
  [[ "$(ps -o stat= -p "${workers[0]}" 2>/dev/null)" == Z* ]] && break
  sleep 0.01
done
took=$(($(now_ms) - t0))
if ! kill -0 "${workers[0]}" 2>/dev/null || [[ "$(ps -o stat= -p "${workers[0]}" 2>/dev/null)" == Z* ]]; then
  wait "${workers[0]}"
  rc=$?
fi
if ((took <= 1000 && rc == 0)); then
  ok "worker 0 ended ${took} ms after SIGTERM inside a ring step, status 0"
else
  tail -5 "$dir/worker-0.log"
  fail "worker 0 after SIGTERM inside a ring step: status $rc after ${took} ms (want 0 within 1000 ms)"
fi
grep -q "cancelled while waiting for" "$dir/worker-0.log" ||
  fail "worker 0's log does not say the ring wait was cancelled"
kill -KILL "${workers[1]}" "${workers[2]}" 2>/dev/null
cleanup
pids=()

# 3. SIGTERM in the final close. Each stage waits for what the next needs, so
# rank 0 is in Close when SIGTERM comes (or enters it with SIGTERM already
# seen: the same CANCELLED). worker.compute_ms 3000 is the window to stop the
# coordinator in once both ranks have their peers.
dir="$TMP/sigterm_close"
mkdir -p "$dir"
cat > "$TMP/close.yaml" <<EOF
job: {name: allreduce-sigterm-close, workers: 2}
training: {mode: allreduce, steps: 1, local_batch: 8}
model: {type: mlp, input_dim: 8, hidden: [8], num_classes: 2, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 2, seed: 3}
worker: {compute_ms: 3000}
network: {lease_s: 30}
allreduce: {timeout_s: 60}
EOF
"$COORD" --config="$TMP/close.yaml" --port=0 --port_file="$dir/port" --out="$dir" \
  --quiet 2> "$dir/coordinator.log" &
coord_pid=$!
pids+=("$coord_pid")
for _ in $(seq 1 200); do [[ -s "$dir/port" ]] && break; sleep 0.05; done
workers=()
for r in 0 1; do
  "$WORKER" --coordinator="127.0.0.1:$(cat "$dir/port")" --rank="$r" \
    --peer_port=0 --advertise_host=127.0.0.1 --metrics_port=0 \
    2> "$dir/worker-$r.log" &
  workers+=($!)
  pids+=($!)
done
# steps_of LOG: the steps completed by the worker logging to LOG, from its
# metrics endpoint (empty before it serves one).
steps_of() {
  local port
  port=$(sed -n 's|.*metrics at http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$1" 2>/dev/null | head -1)
  [[ -n "$port" ]] || return 0
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" &&
    printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' "$port" 2>/dev/null |
    sed -n 's/^pstrain_worker_steps_total \([0-9]*\).*/\1/p'
}
stage="no peers"
for _ in $(seq 1 500); do # both ranks have their peers: the coordinator may stop
  grep -qs "all-reduce: ring" "$dir/worker-0.log" && grep -qs "all-reduce: ring" "$dir/worker-1.log" &&
    stage="peers" && break
  sleep 0.02
done
kill -STOP "$coord_pid"
for _ in $(seq 1 500); do # both all-reduced step 0 and wait on their report
  [[ "$(steps_of "$dir/worker-0.log")" == 1 && "$(steps_of "$dir/worker-1.log")" == 1 ]] &&
    stage="reporting" && break
  sleep 0.02
done
kill -STOP "${workers[1]}"
kill -CONT "$coord_pid"
# Rank 0's report returns and it closes its stream to rank 1 (it says so).
if [[ "$stage" == reporting ]]; then
  for _ in $(seq 1 500); do
    grep -qs "closing the ring" "$dir/worker-0.log" && stage="closing" && break
    sleep 0.02
  done
fi
if [[ "$stage" != closing ]] || ! running_pid "${workers[0]}"; then
  tail -5 "$dir/worker-0.log"
  fail "the final-close case did not set up (reached: $stage; worker 0 running: $(running_pid "${workers[0]}" && echo yes || echo no))"
else
  t0=$(now_ms)
  kill -TERM "${workers[0]}"
  rc=-1
  while running_pid "${workers[0]}"; do
    (($(now_ms) - t0 > 5000)) && break
    sleep 0.01
  done
  took=$(($(now_ms) - t0))
  if ! running_pid "${workers[0]}"; then
    wait "${workers[0]}"
    rc=$?
  fi
  if ((took <= 1000 && rc == 0)); then
    ok "worker 0 ended ${took} ms after SIGTERM in its final close, status 0"
  else
    tail -5 "$dir/worker-0.log"
    fail "worker 0 after SIGTERM in its final close: status $rc after ${took} ms (want 0 within 1000 ms)"
  fi
  grep -q "cancelled while waiting for the neighbour to confirm the last segments" "$dir/worker-0.log" ||
    fail "worker 0's log does not say its final close was cancelled"
fi
kill -KILL "${workers[1]}" 2>/dev/null
cleanup

if ((failures)); then
  echo "$failures failure(s) (seed $seed)"
  exit 1
fi
echo "PASS: two killed ranks restarted, ring re-formed twice, final weights bit-identical; SIGTERM in a ring step and in the final close ends the worker within 1 s (seed $seed)"
