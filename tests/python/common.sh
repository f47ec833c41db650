# tests/python/common.sh: what the Python worker's tests share (sourced
# after tests/lib/procs.sh): the CSV table, a job file writer and the
# worker commands.
PY=/usr/bin/python3
HERE="$ROOT/tests/python"
"$PY" "$HERE/make_csv.py" "$TMP/table.csv" 400 8 3 11
MLP_CMD="/usr/bin/python3 $ROOT/examples/torch/train_mlp.py"
LINEAR_CMD="/usr/bin/python3 $HERE/jobs/linear.py"
LINEAR_TENSORS="[fc.weight:3x8, fc.bias:3]"

# py_job FILE MODEL [YAML...]: a job on the CSV table (2 workers, 2 servers,
# sync, momentum, 20 steps) with MODEL (a flow mapping) and the extra
# top-level YAML sections given, one per argument; a section given replaces
# the default one of that name.
py_job() {
  local file="$1" model="$2" key
  shift 2
  local -A sections=(
    [job]="job: {name: py, workers: 2, servers: 2}"
    [training]="training: {mode: sync, optimizer: momentum, base_lr: 0.1, momentum: 0.9, local_batch: 16, steps: 20}"
    [evaluation]="evaluation: {every_steps: 5}"
  )
  for key in "$@"; do sections[${key%%:*}]="$key"; done
  {
    printf 'model: %s\n' "$model"
    printf 'data: {source: csv, path: "%s", label_column: label, num_classes: 3, test_fraction: 0.2, standardize: true, seed: 7}\n' "$TMP/table.csv"
    for key in "${!sections[@]}"; do printf '%s\n' "${sections[$key]}"; done
  } >"$file"
}
json() { "$REPORT" summary-get "$1" "$2"; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
