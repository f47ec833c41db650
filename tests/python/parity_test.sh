#!/usr/bin/env bash
# Parity of the Python worker with the C++ worker (docs/python.md): the same
# job (MLP 8-16-3, CSV data, sync, momentum, 2 workers, 2 servers, 20 steps)
# trained once by ps_worker and once by examples/torch/train_mlp.py through
# `psctl run --worker-cmd`; the servers' weights after step 20 (the final
# checkpoint, exported with ps_checkpoint) must agree within 1e-5 relative,
# and both runs' metrics must have the same rows and close losses.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # REPORT, TMP, psctl_run, ...
PY=/usr/bin/python3
HERE="$ROOT/tests/python"

"$PY" "$HERE/make_csv.py" "$TMP/table.csv" 400 8 3 11
parity_job() {  # parity_job FILE: the job, with optional extra YAML after it
  cat >"$1" <<YAML
job: {name: parity, workers: 2, servers: 2}
training:
  mode: sync
  optimizer: momentum
  base_lr: 0.1
  momentum: 0.9
  local_batch: 16
  steps: 20
model: {type: mlp, input_dim: 8, hidden: [16], num_classes: 3, activation: relu, seed: 3}
data: {source: csv, path: "$TMP/table.csv", label_column: label, num_classes: 3,
       test_fraction: 0.2, standardize: true, seed: 7}
evaluation: {every_steps: 5}
checkpoint: {every_steps: 20}
YAML
}
parity_job "$TMP/job.yaml"
CMD="/usr/bin/python3 $ROOT/examples/torch/train_mlp.py"

export_final() {  # export_final OUT: OUT/final.safetensors from step 20
  "$CHECKPOINT" export "$1/$(ckpt_step 20)" --safetensors "$1/final.safetensors" >/dev/null
}

psctl_run 300 "$TMP/cpp" "$TMP/cpp.log" --config "$TMP/job.yaml"
if ((rc == 0)) && export_final "$TMP/cpp"; then ok "C++ workers trained the job"; else
  cat "$TMP/cpp.log"; fail "C++ run: rc $rc"; fi
psctl_run 300 "$TMP/py" "$TMP/py.log" --config "$TMP/job.yaml" --worker-cmd "$CMD"
if ((rc == 0)) && export_final "$TMP/py"; then ok "Python workers trained the job"; else
  cat "$TMP/py.log" "$TMP"/py/logs/worker-*.log; fail "Python run: rc $rc"; fi

if "$PY" "$HERE/tensors.py" "$TMP/py/final.safetensors" "$TMP/cpp/final.safetensors" 1e-5 \
    >"$TMP/diff.txt"; then
  ok "weights after 20 steps equal within 1e-5: $(tail -1 "$TMP/diff.txt")"
else
  cat "$TMP/diff.txt"; fail "weights differ"
fi
mapfile -t lc < <("$REPORT" metrics-get "$TMP/cpp" loss)
mapfile -t lp < <("$REPORT" metrics-get "$TMP/py" loss)
if ((${#lc[@]} == 21 && ${#lp[@]} == 21)) &&
    awk -v a="${lc[19]}" -v b="${lp[19]}" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * (a > 0 ? a : 1)) }'; then
  ok "metrics.csv: 21 rows each; step 19 loss ${lc[19]} (C++) vs ${lp[19]} (Python)"
else
  fail "metrics.csv: ${#lc[@]} and ${#lp[@]} rows; step 19 loss ${lc[19]:-?} vs ${lp[19]:-?}"
fi
acc_c="$("$REPORT" summary-get "$TMP/cpp" final_accuracy)"
acc_p="$("$REPORT" summary-get "$TMP/py" final_accuracy)"
if [[ "$acc_c" == "$acc_p" && "$acc_c" != null ]]; then
  ok "final accuracy by counts equal: $acc_p"
else
  fail "final accuracy $acc_c (C++) vs $acc_p (Python)"
fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
