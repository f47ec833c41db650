#!/usr/bin/env bash
# Bad input to a Python worker (docs/python.md) gets a clear error and
# changes nothing: a model whose tensors do not match the job (the error
# names the tensor; no byte is pushed), a bad model.tensors entry (psctl
# exits 2 naming it, nothing started), a wrong job token (UNAUTHENTICATED),
# a missing PSTRAIN_* variable (named). (training.on_failure elastic in mode
# sync, once refused here, runs: elastic_sync_test.)
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"
source "$TEST_SRCDIR/pstrain/tests/python/common.sh"

# 1. A parameter of another shape than the job's tensor.
py_job "$TMP/shape.yaml" "{type: external, num_classes: 3, tensors: $LINEAR_TENSORS}"
psctl_run 120 "$TMP/shape" "$TMP/shape.log" --config "$TMP/shape.yaml" \
  --worker-cmd "/usr/bin/python3 $HERE/jobs/mismatch.py"
why="$("$REPORT" failure "$TMP/shape" 2>/dev/null)"
if ((rc == 1)) && [[ "$why" == *"tensor 'fc/weight': the model's shape [3, 9] is not the job's [3, 8]; nothing was pushed"* ]] &&
    [[ "$(json "$TMP/shape" bytes_pushed)" == 0 ]]; then
  ok "a wrong shape is refused naming the tensor, nothing pushed: $why"
else cat "$TMP/shape.log"; fail "wrong shape: rc $rc, failure '$why', bytes_pushed $(json "$TMP/shape" bytes_pushed)"; fi

# 2. A tensor of the job the model lacks.
py_job "$TMP/missing.yaml" "{type: external, num_classes: 3, tensors: [fc.weight:3x8, fc.bias:3, extra:4]}"
psctl_run 120 "$TMP/missing" "$TMP/missing.log" --config "$TMP/missing.yaml" --worker-cmd "$LINEAR_CMD"
why="$("$REPORT" failure "$TMP/missing" 2>/dev/null)"
if ((rc == 1)) && [[ "$why" == *"the job's tensor 'extra' [4] has no parameter in the model"* ]] &&
    [[ "$(json "$TMP/missing" bytes_pushed)" == 0 ]]; then
  ok "a missing tensor is named, nothing pushed"
else cat "$TMP/missing.log"; fail "missing tensor: rc $rc, failure '$why'"; fi

# 3. A malformed model.tensors entry: exit 2 naming it, nothing started.
py_job "$TMP/entry.yaml" "{type: external, num_classes: 3, tensors: [fc.weight:3x8, fc.bias:3x0]}"
psctl_run 60 "$TMP/entry" "$TMP/entry.log" --config "$TMP/entry.yaml" --worker-cmd "$LINEAR_CMD"
# user-facing message check: the error names the entry and its shape.
if ((rc == 2)) && grep -q "model.tensors\[1\]: tensor 'fc/bias': shape '3x0'" "$TMP/entry.log" &&
    ! [[ -e "$TMP/entry/logs/coordinator.log" ]]; then
  ok "a bad model.tensors entry is named, nothing started"
else cat "$TMP/entry.log"; fail "bad entry: rc $rc"; fi

# 4. A wrong job token: every call is UNAUTHENTICATED, the job fails.
od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$TMP/wrong.token"
py_job "$TMP/token.yaml" "{type: external, num_classes: 3, tensors: $LINEAR_TENSORS}" \
  "network: {startup_timeout_s: 120}"
psctl_run 120 "$TMP/token" "$TMP/token.log" --config "$TMP/token.yaml" \
  --worker-cmd "env PSTRAIN_TOKEN_FILE=$TMP/wrong.token $LINEAR_CMD"
# user-facing message check: the refused worker says why.
if ((rc == 1)) && grep -q "UNAUTHENTICATED" "$TMP"/token/logs/worker-*.log; then
  ok "a wrong job token is refused (UNAUTHENTICATED)"
else cat "$TMP/token.log"; fail "wrong token: rc $rc"; fi

# 5. Started without the launcher: the missing variable is named.
out="$(env -u PSTRAIN_COORDINATOR PYTHONPATH="$ROOT/python" "$PY" "$HERE/jobs/linear.py" 2>&1)"
if [[ $? -ne 0 && "$out" == *"PSTRAIN_COORDINATOR is not set"* ]]; then
  ok "no PSTRAIN_COORDINATOR: named"
else echo "$out"; fail "no PSTRAIN_COORDINATOR"; fi
out="$(PSTRAIN_COORDINATOR=127.0.0.1:1 PYTHONPATH="$ROOT/python" "$PY" "$HERE/jobs/linear.py" 2>&1)"
if [[ $? -ne 0 && "$out" == *"PSTRAIN_TOKEN_FILE is not set"* ]]; then
  ok "no PSTRAIN_TOKEN_FILE: named"
else echo "$out"; fail "no PSTRAIN_TOKEN_FILE"; fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
