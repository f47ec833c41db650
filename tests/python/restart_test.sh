#!/usr/bin/env bash
# kill -9 of a Python worker under training.on_failure: restart
# (docs/python.md): rank 1 kills itself with SIGKILL at step 12; psctl
# starts the command again, the coordinator rolls the job back to the
# checkpoint of step 10, both Python workers resume there, and the job ends
# with the very weights of an undisturbed run (sync is deterministic).
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"
source "$TEST_SRCDIR/pstrain/tests/python/common.sh"
EXT="{type: external, num_classes: 3, seed: 3, tensors: $LINEAR_TENSORS}"
TRAIN="training: {mode: sync, optimizer: momentum, base_lr: 0.1, momentum: 0.9, local_batch: 16, steps: 30, on_failure: restart, max_restarts: 1, restart_timeout_s: 60}"
py_job "$TMP/job.yaml" "$EXT" "$TRAIN" "checkpoint: {every_steps: 5}" "network: {lease_s: 2}"

psctl_run 300 "$TMP/calm" "$TMP/calm.log" --config "$TMP/job.yaml" --worker-cmd "$LINEAR_CMD"
((rc == 0)) || { cat "$TMP/calm.log"; fail "undisturbed run: rc $rc"; }
psctl_run 300 "$TMP/kill" "$TMP/kill.log" --config "$TMP/job.yaml" \
  --worker-cmd "env PSTRAIN_TEST_DIE_AT=12 PSTRAIN_TEST_MARKER=$TMP/died $LINEAR_CMD"
# user-facing message check: psctl says it restarted worker-1 (no file
# records psctl's restarts).
if ((rc == 0)) && [[ -e "$TMP/died" ]] &&
    grep -q "worker-1 (pid [0-9]*) exited with status 137; restarted" "$TMP/kill.log"; then
  ok "the killed Python worker was started again and the job succeeded"
else cat "$TMP/kill.log" "$TMP"/kill/logs/worker-*.log; fail "killed run: rc $rc"; fi
# The coordinator's rollback, then the survivor's part, as its report said
# (supervision.txt):
if has_note "$TMP/kill" "rolled back generation 1 to step 10"; then
  ok "the coordinator rolled the job back to step 10 in generation 1"
else fail "supervision.txt notes no rollback to step 10: $(cat "$TMP/kill/supervision.txt" 2>&1)"; fi
if has_note "$TMP/kill" "resumed worker 0 in generation 1 at step 10"; then
  ok "the surviving worker rolled back to step 10 in generation 1"
else cat "$TMP/kill/logs/worker-0.log"; fail "supervision.txt notes no in-process resume of worker 0: $(cat "$TMP/kill/supervision.txt" 2>&1)"; fi
# One row per step; every step from the rollback on has one (steps before it
# whose reports were lost with the old generation have none, as for the C++
# worker: docs/failures-and-recovery.md).
mapfile -t steps < <("$REPORT" metrics-get "$TMP/kill" step)
if [[ "$(printf '%s\n' "${steps[@]}" | sort -n | uniq | tr '\n' ' ')" == "$(printf '%s\n' "${steps[@]}" | tr '\n' ' ')" ]] &&
    [[ " ${steps[*]} " == *" $(seq -s ' ' 10 30) "* ]]; then
  ok "metrics.csv: one row per step, steps 10..30 all there (${#steps[@]} rows)"
else fail "metrics.csv steps: ${steps[*]}"; fi
for run in calm kill; do
  "$CHECKPOINT" export "$TMP/$run/$(ckpt_step 30)" --safetensors "$TMP/$run.safetensors" >/dev/null ||
    fail "no final checkpoint in $run"
done
if "$PY" "$HERE/tensors.py" "$TMP/kill.safetensors" "$TMP/calm.safetensors" 0 >"$TMP/diff.txt"; then
  ok "final weights equal to the undisturbed run's, bit for bit"
else cat "$TMP/diff.txt"; fail "final weights differ from the undisturbed run's"; fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
