#!/usr/bin/env bash
# kill -9 of a Python worker under training.on_failure: elastic in mode
# async (docs/python.md): rank 1 kills itself at step 10; the coordinator
# declares it dead when its lease runs out and the job goes on with worker 0
# (async needs no stand-in: the rank's micro-batches are skipped); psctl
# starts the command again and the new process rejoins rank 1 with a new
# session at the live worker's step; the job succeeds. Mode sync, which
# needs a stand-in, is refused (bad_input_test).
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"
source "$TEST_SRCDIR/pstrain/tests/python/common.sh"
EXT="{type: external, num_classes: 3, seed: 3, tensors: $LINEAR_TENSORS}"
TRAIN="training: {mode: async, staleness: 2, optimizer: momentum, base_lr: 0.1, momentum: 0.9, local_batch: 16, steps: 400, on_failure: elastic}"
py_job "$TMP/job.yaml" "$EXT" "$TRAIN" "evaluation: {every_steps: 50}" \
  "network: {lease_s: 2, startup_timeout_s: 180}"

# 0.5 s a step until the replacement has pushed its first step (it creates
# $TMP/rejoined then), full speed after: up to 200 s of training for a
# replacement to start PyTorch and rejoin on a loaded machine, and no more
# than the rejoin takes on a quiet one.
psctl_run 900 "$TMP/run" "$TMP/run.log" --config "$TMP/job.yaml" \
  --worker-cmd "env PSTRAIN_TEST_DIE_AT=10 PSTRAIN_TEST_MARKER=$TMP/died PSTRAIN_TEST_REJOINED=$TMP/rejoined PSTRAIN_TEST_STEP_SLEEP=0.5 $LINEAR_CMD"
# user-facing message check: psctl says it starts worker-1 again (no file
# records psctl's restarts).
if ((rc == 0)) && [[ -e "$TMP/died" ]] &&
    grep -q "worker-1 (pid [0-9]*) exited with status 137; starting it again" "$TMP/run.log"; then
  ok "the killed Python worker was started again and the job succeeded"
else cat "$TMP/run.log" "$TMP"/run/logs/worker-*.log; fail "elastic run: rc $rc"; fi
# The coordinator's notes (supervision.txt): the departure and the rejoin.
if has_note "$TMP/run" "dropped worker 1 from step [0-9]+"; then
  ok "the job went on without worker 1"
else cat "$TMP/run/supervision.txt"; fail "supervision.txt notes no departure of worker 1"; fi
joined="$(noted "$TMP/run" "rejoined worker 1 from step [0-9]+" | head -n 1)"
if [[ -n "$joined" && -e "$TMP/rejoined" ]]; then
  ok "the replacement rejoined: $joined"
else
  cat "$TMP/run/supervision.txt" "$TMP/run/logs/worker-1.log"
  fail "the replacement did not rejoin rank 1 and train a step (note '$joined'; $TMP/rejoined $([[ -e "$TMP/rejoined" ]] || echo "not ")created)"
fi
acc="$(json "$TMP/run" final_accuracy)"
if [[ "$(json "$TMP/run" failed)" == false ]] && ge "$acc" 0.7; then
  ok "final accuracy $acc"
else fail "summary: failed $(json "$TMP/run" failed), accuracy '$acc'"; fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
