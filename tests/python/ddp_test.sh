#!/usr/bin/env bash
# Mode ddp of psctl compare (docs/python.md): the same Python script
# (examples/torch/train_mlp.py) trains the same sync job once on pstrain's
# servers and once under torch.distributed (gloo, DistributedDataParallel,
# torch.optim); the final weights agree within 1e-5 relative and the report
# has a ddp row with computed bytes.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"
source "$TEST_SRCDIR/pstrain/tests/python/common.sh"
py_job "$TMP/job.yaml" "{type: mlp, input_dim: 8, hidden: [16], num_classes: 3, activation: relu, seed: 3}" \
  "checkpoint: {every_steps: 20}"

psctl_compare 600 "$TMP/cmp.log" --config "$TMP/job.yaml" --modes sync,ddp \
  --worker-cmd "$MLP_CMD" --out "$TMP/cmp"
if ((rc == 0)) && [[ "$(cat "$TMP/cmp/runs/ddp/status")" == ok ]]; then
  ok "psctl compare --modes sync,ddp ran both"
else
  cat "$TMP/cmp.log" "$TMP"/cmp/runs/*/psctl.log "$TMP"/cmp/runs/ddp/logs/*.log; fail "compare: rc $rc"
fi
if grep -q '^| `ddp` | 1/1 ' "$TMP/cmp/report.md" && grep -q "bytes per worker per step are \*\*computed\*\*" "$TMP/cmp/report.md"; then
  ok "report.md has the ddp row and says its bytes are computed"; else
  cat "$TMP/cmp/report.md"; fail "no ddp row in report.md"; fi
if [[ "$(json "$TMP/cmp/runs/ddp" bytes_computed)" == true ]] &&
    (($(json "$TMP/cmp/runs/ddp" bytes_pushed) > 0)); then
  ok "ddp bytes are computed and labelled so ($(json "$TMP/cmp/runs/ddp" bytes_pushed))"
else fail "ddp bytes not labelled as computed"; fi
"$CHECKPOINT" export "$TMP/cmp/runs/sync/$(ckpt_step 20)" --safetensors "$TMP/sync.safetensors" >/dev/null ||
  fail "no final checkpoint of the sync run"
if "$PY" "$HERE/tensors.py" "$TMP/cmp/runs/ddp/final.safetensors" "$TMP/sync.safetensors" 1e-5 \
    >"$TMP/diff.txt"; then
  ok "sync and ddp end within 1e-5: $(tail -1 "$TMP/diff.txt")"
else cat "$TMP/diff.txt"; fail "sync and ddp weights differ"; fi
a="$(json "$TMP/cmp/runs/sync" final_accuracy)" b="$(json "$TMP/cmp/runs/ddp" final_accuracy)"
[[ "$a" == "$b" ]] && ok "final accuracy equal: $a" || fail "final accuracy $a (sync) vs $b (ddp)"

# --ddp-cmd: mode ddp runs the PyTorch wide-and-deep (pst.WideDeep, AdaGrad)
# while sync keeps the C++ worker; both train the same model (same tensors,
# initial values, hashing, data), so they end at the same losses.
psctl_compare 600 "$TMP/wd.log" --config "$ROOT/configs/sparse.yaml" --workers 2 --steps 4 \
  --eval-every 4 --set model.buckets=1000 --set training.local_batch=32 \
  --set data.test_examples=200 --modes sync,ddp \
  --ddp-cmd "/usr/bin/python3 $ROOT/examples/torch/train_wide_deep.py" --out "$TMP/wd"
if ((rc == 0)) && [[ "$(cat "$TMP/wd/runs/ddp/status")" == ok ]]; then
  ok "psctl compare --modes sync,ddp --ddp-cmd: C++ sync and PyTorch DDP ran"
else
  cat "$TMP/wd.log" "$TMP"/wd/runs/*/psctl.log "$TMP"/wd/runs/ddp/logs/*.log; fail "wide_deep compare: rc $rc"
fi
for key in final_loss final_eval_loss; do
  a="$(json "$TMP/wd/runs/sync" "$key")" b="$(json "$TMP/wd/runs/ddp" "$key")"
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5 * a) }' &&
    ok "wide_deep $key: sync $a, ddp $b (within 1e-5)" || fail "wide_deep $key: sync $a vs ddp $b"
done
[[ "$(json "$TMP/wd/runs/ddp" bytes_computed)" == true ]] || fail "wide_deep ddp bytes not marked computed"

# ddp without a command is refused naming the option.
psctl_compare 60 "$TMP/no.log" --config "$TMP/job.yaml" --modes ddp --out "$TMP/no"
# user-facing message check: the error names the option.
if ((rc == 2)) && grep -q "needs --worker-cmd" "$TMP/no.log"; then ok "ddp without --worker-cmd refused"
else cat "$TMP/no.log"; fail "ddp without --worker-cmd: rc $rc"; fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
