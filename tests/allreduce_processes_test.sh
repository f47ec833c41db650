#!/usr/bin/env bash
# Mode allreduce with real processes: a coordinator and 3 ps_worker
# processes (no servers) on loopback ephemeral ports train, every replica
# ends with the same weight fingerprint, and the summary is an allreduce one.
# Then a worker killed mid-job: the others fail within the all-reduce
# timeout and the coordinator fails the job; nothing hangs.
set -uo pipefail

ROOT="$TEST_SRCDIR/pstrain"
COORD="$ROOT/coordinator/ps_coordinator"
WORKER="$ROOT/worker/ps_worker"
REPORT="$ROOT/tools/report/ps_report"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0
pids=()

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
json() { "$REPORT" summary-get "$1" "$2"; }
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup EXIT

# start_job DIR CONFIG STEPS: coordinator (pid in $coord) and 3 workers
# (pids in ${workers[@]}, index = rank).
start_job() {
  local dir="$1" config="$2" steps="$3"
  mkdir -p "$dir"
  "$COORD" --config="$config" --mode=allreduce --workers=3 --steps="$steps" \
    --port=0 --port_file="$dir/port" --out="$dir" --quiet 2> "$dir/coordinator.log" &
  coord=$!
  pids+=("$coord")
  for _ in $(seq 1 100); do [[ -s "$dir/port" ]] && break; sleep 0.05; done
  [[ -s "$dir/port" ]] || { fail "coordinator did not start"; return 1; }
  workers=()
  local r
  for r in 0 1 2; do
    "$WORKER" --coordinator="127.0.0.1:$(cat "$dir/port")" --rank="$r" \
      --peer_port=0 --advertise_host=127.0.0.1 2> "$dir/worker-$r.log" &
    workers+=($!)
    pids+=($!)
  done
}

# 1. A clean job.
dir="$TMP/ok"
start_job "$dir" "$ROOT/configs/default.yaml" 60 || exit 1
for r in 0 1 2; do
  wait "${workers[$r]}" || fail "worker $r exited with $?"
done
wait "$coord" || fail "coordinator exited with $?"
prints=$(grep -ho "fingerprint [0-9a-f]*" "$dir"/worker-*.log | sort -u)
if [[ $(grep -c . <<<"$prints") -eq 1 ]] &&
   [[ $(grep -l "fingerprint" "$dir"/worker-*.log | wc -l) -eq 3 ]]; then
  ok "3 replicas agree: $prints"
else
  fail "replica fingerprints differ or are missing: $prints"
fi
[[ "$(json "$dir/summary.json" mode)" == allreduce ]] || fail "mode is not allreduce"
[[ "$(json "$dir/summary.json" servers)" == 0 ]] || fail "servers is not 0"
[[ "$(json "$dir/summary.json" steps)" == 60 ]] || fail "steps != 60"
[[ "$(json "$dir/summary.json" failed)" == false ]] || fail "job failed"
pushed="$(json "$dir/summary.json" bytes_pushed)"
[[ "$pushed" -gt 0 && "$pushed" == "$(json "$dir/summary.json" bytes_pulled)" ]] ||
  fail "ring bytes: pushed $pushed"
rows=$("$REPORT" metrics-get "$dir" step | wc -l)
[[ $rows -eq 61 ]] || fail "metrics.csv has $rows rows, want 60 + final eval"
((failures == 0)) && ok "allreduce job: $(json "$dir/summary.json" final_accuracy) accuracy, $pushed ring bytes"
if ((failures)); then cat "$dir"/*.log; fi

# 2. Rank 1 is killed mid-job: ranks 0 and 2 fail within the timeout.
dir="$TMP/kill"
config="$TMP/slow.yaml"
sed 's/^  name: default/  name: slow/' "$ROOT/configs/default.yaml" > "$config"
printf 'worker:\n  compute_ms: 20\nallreduce:\n  timeout_s: 1\n' >> "$config"
start_job "$dir" "$config" 1000 || exit 1
for _ in $(seq 1 100); do
  grep -q "all 3 workers registered" "$dir/coordinator.log" && break; sleep 0.05
done
sleep 0.5
kill -KILL "${workers[1]}"
start=$SECONDS
for r in 0 2; do
  # bash's wait has no timeout: poll, at most 15 s.
  while kill -0 "${workers[$r]}" 2>/dev/null && ((SECONDS - start < 15)); do sleep 0.1; done
  if kill -0 "${workers[$r]}" 2>/dev/null; then
    fail "worker $r still running 15 s after rank 1 died"
  else
    wait "${workers[$r]}"; rc=$?
    ((rc != 0)) || fail "worker $r exited 0 after rank 1 died"
    grep -E "DEADLINE_EXCEEDED|UNAVAILABLE|CANCELLED" "$dir/worker-$r.log" | head -1
  fi
done
while kill -0 "$coord" 2>/dev/null && ((SECONDS - start < 20)); do sleep 0.1; done
if kill -0 "$coord" 2>/dev/null; then
  fail "coordinator still running after the workers failed"
else
  wait "$coord"; rc=$?
  ((rc == 1)) || fail "coordinator exited $rc, want 1"
  [[ "$(json "$dir/summary.json" failed)" == true ]] || fail "summary does not say failed"
  # The first failure's cause: a surviving worker (rank 0 or 2) saw it.
  cause="$("$REPORT" failure "$dir")"
  [[ "$(json "$dir/summary.json" failure.process)" == worker &&
     "$(json "$dir/summary.json" failure.rank)" =~ ^[02]$ ]] ||
    fail "summary.json failure is not a surviving worker: $cause"
  echo "recorded cause: $cause"
fi
ok "killed rank 1: the others stopped after $((SECONDS - start)) s"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
