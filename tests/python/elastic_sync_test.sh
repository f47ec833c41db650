#!/usr/bin/env bash
# kill -9 of a Python worker under training.on_failure: elastic in mode sync
# (docs/python.md): rank 1 kills itself at step 10; the coordinator declares
# it dead when its lease runs out and worker 0 stands in for it (per step it
# computes rank 1's batch too, with the same weights, and pushes it under
# rank 1's session); psctl starts the command again and the new process
# takes rank 1 back at one of worker 0's step boundaries (handover). Worker 0
# holds at its next batch until the newcomer asks (PSTRAIN_TEST_HOLD_STAND_IN),
# so no timing decides whether the handover happens. The job's final weights
# equal an undisturbed run's, bit for bit (sync is deterministic).
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"
source "$TEST_SRCDIR/pstrain/tests/python/common.sh"
EXT="{type: external, num_classes: 3, seed: 3, tensors: $LINEAR_TENSORS}"
TRAIN="training: {mode: sync, optimizer: momentum, base_lr: 0.1, momentum: 0.9, local_batch: 16, steps: 40, on_failure: elastic}"
py_job "$TMP/job.yaml" "$EXT" "$TRAIN" "checkpoint: {every_steps: 40}" \
  "network: {lease_s: 2, startup_timeout_s: 180}"

psctl_run 300 "$TMP/calm" "$TMP/calm.log" --config "$TMP/job.yaml" --worker-cmd "$LINEAR_CMD"
((rc == 0)) || { cat "$TMP/calm.log" "$TMP"/calm/logs/worker-*.log; fail "undisturbed run: rc $rc"; }
psctl_run 300 "$TMP/kill" "$TMP/kill.log" --config "$TMP/job.yaml" \
  --worker-cmd "env PSTRAIN_TEST_DIE_AT=10 PSTRAIN_TEST_MARKER=$TMP/died PSTRAIN_TEST_HOLD_STAND_IN=1 PSTRAIN_STARTUP_TIMEOUT_S=180 $LINEAR_CMD"
# user-facing message check: psctl says it starts worker-1 again (no file
# records psctl's restarts).
if ((rc == 0)) && [[ -e "$TMP/died" ]] &&
    grep -q "worker-1 (pid [0-9]*) exited with status 137; starting it again" "$TMP/kill.log"; then
  ok "the killed Python worker was started again and the job succeeded"
else cat "$TMP/kill.log" "$TMP"/kill/logs/worker-*.log; fail "killed run: rc $rc"; fi
# The coordinator's notes (supervision.txt): the takeover, the release and
# the rejoin at the step the stand-in stopped before.
taken="$(noted "$TMP/kill" "taken over worker 1 from step [0-9]+ by worker 0" | head -n 1)"
if [[ -n "$taken" ]]; then
  ok "worker 0 stood in: $taken"
else cat "$TMP/kill/supervision.txt" "$TMP/kill/logs/worker-0.log"; fail "supervision.txt notes no takeover of rank 1 by worker 0"; fi
released="$(noted "$TMP/kill" "released worker 1 before step [0-9]+" | head -n 1)"
joined="$(noted "$TMP/kill" "rejoined worker 1 from step [0-9]+" | head -n 1)"
if [[ -n "$released" && -n "$joined" && "${released##* }" == "${joined##* }" ]]; then
  ok "the replacement took rank 1 back where the stand-in stopped: $released; $joined"
else cat "$TMP/kill/supervision.txt"; fail "handover: released '$released', rejoined '$joined'"; fi
if [[ "$(json "$TMP/kill" failed)" == false && "$(json "$TMP/kill" steps)" == 40 ]]; then
  ok "summary.json: not failed, 40 steps"
else fail "summary: failed $(json "$TMP/kill" failed), steps $(json "$TMP/kill" steps)"; fi
for run in calm kill; do
  "$CHECKPOINT" export "$TMP/$run/$(ckpt_step 40)" --safetensors "$TMP/$run.safetensors" >/dev/null ||
    fail "no final checkpoint in $run"
done
if "$PY" "$HERE/tensors.py" "$TMP/kill.safetensors" "$TMP/calm.safetensors" 0 >"$TMP/diff.txt"; then
  ok "final weights equal to the undisturbed run's, bit for bit"
else cat "$TMP/diff.txt"; fail "final weights differ from the undisturbed run's"; fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
