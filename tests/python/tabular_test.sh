#!/usr/bin/env bash
# The tabular example with categorical embeddings (examples/torch/
# train_tabular.py, docs/python.md "Examples") on the synthetic Zipf task:
# the data a Python worker reads is the C++ generator's (`ps_report
# data-export`, read by pstrain.data.read_export), and a short sync job of 2
# workers and 2 servers trains: the loss falls by 20 % and the accuracy by
# counts reaches 0.6 (chance is 0.25; an MLP without embeddings gets 0.455
# on this task's shape, docs/sparse-model.md; measured 0.753).
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"
source "$TEST_SRCDIR/pstrain/tests/python/common.sh"

# A small version of configs/tabular_embeddings.yaml.
sed -e 's/^  workers: 4$/  workers: 2/' -e 's/^  steps: 400$/  steps: 120/' \
  -e 's/^  every_steps: 100$/  every_steps: 40/' -e 's/^  test_examples: 2000$/  test_examples: 600/' \
  "$ROOT/configs/tabular_embeddings.yaml" >"$TMP/job.yaml"
grep -q '^  workers: 2$' "$TMP/job.yaml" && grep -q '^  steps: 120$' "$TMP/job.yaml" ||
  fail "configs/tabular_embeddings.yaml changed: the test's sed no longer applies"

# 1. The export: rank 1's rows as Python reads them; a sub-range of steps is
# the same rows as the whole run's (examples are functions of their id).
"$REPORT" data-export --config "$TMP/job.yaml" --rank 1 --out "$TMP/all.psdata" &&
  "$REPORT" data-export --config "$TMP/job.yaml" --rank 1 --steps 7:9 --out "$TMP/part.psdata" ||
  fail "ps_report data-export failed"
out="$(PYTHONPATH="$ROOT/python" PSTRAIN_PY_STUBS="$ROOT/python/pstrain/_gen" "$PY" - "$TMP" <<'PYEOF' 2>&1
import sys
import numpy as np
from pstrain import data
d = data.read_export(sys.argv[1] + "/all.psdata", num_classes=4)
p = data.read_export(sys.argv[1] + "/part.psdata", num_classes=4)
assert (d.rank, d.world, d.slice, d.train_x.shape, d.train_cat.shape) == \
    (1, 2, 64, (120 * 64, 8), (120 * 64, 4)), (d.rank, d.world, d.slice, d.train_x.shape)
lo, hi = d.step_rows(7)
assert np.array_equal(p.train_x, d.train_x[lo:lo + 128])
assert np.array_equal(p.train_cat, d.train_cat[lo:lo + 128])
assert np.array_equal(p.train_y, d.train_y[lo:lo + 128])
assert d.test_x.shape == (600, 8) and set(np.unique(d.test_y)) <= {0, 1, 2, 3}
# Zipf: the most frequent value of a column is far above uniform's share.
_, counts = np.unique(d.train_cat[:, 0], return_counts=True)
assert counts.max() > 20 * len(d.train_cat) / 1000, counts.max()
print("export ok", len(np.unique(d.train_cat)), "distinct ids")
PYEOF
)"
if [[ $? -eq 0 && "$out" == *"export ok"* ]]; then ok "the export reads back in Python: $out"
else echo "$out"; fail "reading the export"; fi

# 2. A short sync job trains.
psctl_run 600 "$TMP/run" "$TMP/run.log" --config "$TMP/job.yaml" \
  --worker-cmd "/usr/bin/python3 $ROOT/examples/torch/train_tabular.py"
acc="$(json "$TMP/run" final_accuracy)"
losses="$("$REPORT" metrics-get "$TMP/run" loss)"
first="$(head -5 <<<"$losses" | awk '{ s += $1 } END { print s / NR }')"
last="$(tail -5 <<<"$losses" | awk '{ s += $1 } END { print s / NR }')"
if ((rc == 0)) && ge "$acc" 0.6 && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }'; then
  ok "the tabular example trains: loss $first -> $last (mean of 5 steps), accuracy $acc"
else cat "$TMP/run.log"; fail "tabular job: rc $rc, accuracy '$acc', loss $first -> $last"; fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
