#!/usr/bin/env bash
# training.on_failure: elastic in mode sync with real processes (README
# "Elastic workers"): a coordinator, 2 ps_server and 2 ps_worker processes
# on loopback ephemeral ports, network.lease_s = 1, a final checkpoint.
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

ROOT="$TEST_SRCDIR/pstrain"
COORD="$ROOT/coordinator/ps_coordinator"
SERVER="$ROOT/server/ps_server"
WORKER="$ROOT/worker/ps_worker"
REPORT="$ROOT/tools/report/ps_report"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0
pids=()

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup EXIT
now_ms() { date +%s%3N; }

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
final=$(printf 'ckpt/step-%012d' "$STEPS")

start_job() {  # DIR: pids in $coord, ${servers[@]}, ${workers[@]}
  local dir="$1" k
  mkdir -p "$dir"
  "$COORD" --config="$TMP/job.yaml" --port=0 --port_file="$dir/port" \
    --out="$dir" --quiet 2> "$dir/coordinator.log" &
  coord=$!
  pids+=("$coord")
  for _ in $(seq 1 200); do [[ -s "$dir/port" ]] && break; sleep 0.05; done
  [[ -s "$dir/port" ]] || { fail "coordinator did not start"; return 1; }
  addr="127.0.0.1:$(cat "$dir/port")"
  servers=() workers=()
  for k in 0 1; do
    "$SERVER" --coordinator="$addr" --shard="$k" 2> "$dir/server-$k.log" &
    servers+=($!)
    pids+=($!)
  done
  for k in 0 1; do
    "$WORKER" --coordinator="$addr" --rank="$k" 2> "$dir/worker-$k.log" &
    workers+=($!)
    pids+=($!)
  done
}

exited_within() {  # PID SECONDS; sets rc
  local pid="$1" limit_ms=$(( $(now_ms) + $2 * 1000 ))
  while kill -0 "$pid" 2>/dev/null; do
    if (($(now_ms) > limit_ms)); then return 1; fi
    [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" == Z* ]] && break
    sleep 0.02
  done
  wait "$pid"
  rc=$?
  return 0
}

# 1. The undisturbed job.
calm="$TMP/calm"
start_job "$calm" || exit 1
if ! exited_within "$coord" 30 || ((rc != 0)); then
  fail "the undisturbed job did not complete: $(tail -3 "$calm/coordinator.log")"
  exit 1
fi
[[ -f "$calm/$final/MANIFEST.json" ]] || { fail "no final checkpoint in the undisturbed run"; exit 1; }
for p in "${servers[@]}" "${workers[@]}"; do exited_within "$p" 5; done

# 2. Worker 1 stopped after a random number of steps.
dir="$TMP/stopped"
start_job "$dir" || exit 1
stop_after=$((10 + $(date +%N | sed 's/^0*//') % 40))
for _ in $(seq 1 400); do
  (($(wc -l < "$dir/metrics.csv" 2>/dev/null || echo 0) > stop_after)) && break
  sleep 0.02
done
kill -STOP "${workers[1]}"
echo "worker 1 stopped after about $stop_after steps"
for _ in $(seq 1 200); do
  grep -q "taken over from step" "$dir/coordinator.log" && break
  sleep 0.05
done
# 3. Continued once it has been replaced: refused everywhere.
kill -CONT "${workers[1]}"
if exited_within "${workers[1]}" 10; then
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
grep -q "worker 1 at .* is dead: silent for" "$dir/coordinator.log" &&
  ok "worker 1 declared dead after the lease" ||
  fail "no death line: $(grep -i dead "$dir/coordinator.log")"
line=$(grep -o "worker rank 1 taken over from step [0-9]*.*global batch kept" "$dir/coordinator.log")
[[ -n "$line" ]] && ok "$line" || fail "no takeover line in the coordinator log"
grep -q "standing in for worker rank 1 from step" "$dir/worker-0.log" &&
  ok "worker 0: $(grep -o "standing in for worker rank 1 from step [0-9]*" "$dir/worker-0.log")" ||
  fail "worker 0 did not stand in: $(tail -3 "$dir/worker-0.log")"
failed=$("$REPORT" summary-get "$dir" failed 2>&1)
[[ "$failed" == "false" ]] && ok "summary.json: failed = false" ||
  fail "summary.json failed = '$failed': $("$REPORT" failure "$dir" 2>&1)"
steps=$("$REPORT" summary-get "$dir" steps 2>&1)
[[ "$steps" == "$STEPS" ]] && ok "summary.json: all $STEPS steps" ||
  fail "summary.json steps = '$steps', want $STEPS"
exited_within "${workers[0]}" 5 && ((rc == 0)) && ok "worker 0 finished (exit 0)" ||
  fail "worker 0: rc ${rc:-?}: $(tail -2 "$dir/worker-0.log")"
# Bit for bit: the final checkpoint's shard files.
if [[ -f "$dir/$final/MANIFEST.json" ]]; then
  same=1
  for f in shard-00000-of-00002.ckpt shard-00001-of-00002.ckpt; do
    cmp -s "$calm/$final/$f" "$dir/$final/$f" || { same=0; fail "$f differs from the undisturbed run's"; }
  done
  ((same)) && ok "final shard files byte-identical to the undisturbed run's"
else
  fail "the job with the stopped worker has no final checkpoint"
fi

if ((failures)); then
  echo "--- coordinator"; tail -20 "$dir/coordinator.log"
  echo "--- worker 0"; tail -20 "$dir/worker-0.log"
  echo "--- worker 1"; tail -10 "$dir/worker-1.log"
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
