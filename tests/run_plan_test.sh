#!/usr/bin/env bash
# `psctl run`'s plan step (issue 11 #8, #9, #10): an explicitly given
# --servers/--workers/--steps 0 is rejected by name, default output folders
# are never shared, and a missing or malformed data file or a model that does
# not fit the data is found before any process is launched.
set -uo pipefail

SRC="$TEST_SRCDIR/pstrain"
BIN="$SRC"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
# A private copy of psctl: its folder is its root, so runs/ lands in $TMP.
ROOT="$TMP/root"
mkdir -p "$ROOT"
cp "$SRC/psctl" "$ROOT/psctl"
PSCTL="$ROOT/psctl"
CONFIG="$SRC/configs/default.yaml"
failures=0 passed=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; passed=$((passed + 1)); }

# Expects `psctl run ARGS...` to exit 2 naming $1 without launching anything
# (no coordinator log in its output folder).
expect_rejected() {
  local want="$1" name="$2"; shift 2
  local out="$TMP/$name" rc=0
  "$PSCTL" run --bin "$BIN" --out "$out" "$@" >"$TMP/$name.log" 2>&1 || rc=$?
  if ((rc != 2)); then
    cat "$TMP/$name.log"; fail "$name: exit status $rc, want 2"
  elif ! grep -qF -- "$want" "$TMP/$name.log"; then
    cat "$TMP/$name.log"; fail "$name: the error does not name '$want'"
  elif [[ -e "$out/logs/coordinator.log" ]]; then
    fail "$name: a coordinator was launched"
  else
    ok "$name: $(grep -F -- "$want" "$TMP/$name.log" | head -1)"
  fi
}

# #8: explicit zeros are rejected by flag name (they used to be ignored).
expect_rejected "--servers: job.servers: must be >= 1, got 0" servers0 --config "$CONFIG" --servers 0
expect_rejected "--workers: job.workers: must be >= 1, got 0" workers0 --config "$CONFIG" --workers 0
expect_rejected "--steps: training.steps: must be >= 1, got 0" steps0 --config "$CONFIG" --steps 0
expect_rejected "--staleness: training.staleness" staleness_bad --config "$CONFIG" --staleness -1

# #10: data problems before anything is launched, naming the file (and line).
job() {  # job FILE DATA_PATH INPUT_DIM
  cat >"$1" <<YAML
job: {workers: 1, servers: 1}
training: {steps: 3, local_batch: 2}
model: {type: softmax, input_dim: $3, num_classes: 2}
data: {source: csv, path: "$2", label_column: label}
YAML
}
printf 'a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n9,10,0\n' >"$TMP/good.csv"
printf 'a,b,label\n1,2,0\n3,4,1,9\n' >"$TMP/bad.csv"
job "$TMP/missing.yaml" "$TMP/nowhere.csv" 2
expect_rejected "$TMP/nowhere.csv" data_missing --config "$TMP/missing.yaml"
job "$TMP/malformed.yaml" "$TMP/bad.csv" 2
expect_rejected "$TMP/bad.csv:3" data_malformed --config "$TMP/malformed.yaml"
job "$TMP/mismatch.yaml" "$TMP/good.csv" 5
expect_rejected "model.input_dim is 5" data_mismatch --config "$TMP/mismatch.yaml"

# ... and the same job with a fitting model runs, honouring --steps.
job "$TMP/fits.yaml" "$TMP/good.csv" 2
if "$PSCTL" run --bin "$BIN" --config "$TMP/fits.yaml" --steps 4 --out "$TMP/fits" \
    >"$TMP/fits.log" 2>&1 && grep -q '"steps": 4' "$TMP/fits/summary.json"; then
  ok "csv job with a fitting model runs 4 steps (--steps honoured)"
else
  cat "$TMP/fits.log"; fail "csv job with a fitting model"
fi

# #9: two runs without --out started together get two folders, both succeed.
"$PSCTL" run --bin "$BIN" --config "$TMP/fits.yaml" >"$TMP/twin1.log" 2>&1 &
p1=$!
"$PSCTL" run --bin "$BIN" --config "$TMP/fits.yaml" >"$TMP/twin2.log" 2>&1 &
p2=$!
rc1=0 rc2=0
wait "$p1" || rc1=$?
wait "$p2" || rc2=$?
mapfile -t dirs < <(find "$ROOT/runs" -mindepth 1 -maxdepth 1 -type d | sort)
if ((rc1 == 0 && rc2 == 0)) && ((${#dirs[@]} == 2)) &&
    [[ -s "${dirs[0]}/summary.json" && -s "${dirs[1]}/summary.json" ]]; then
  ok "two runs started together: ${dirs[*]##*/}"
else
  cat "$TMP/twin1.log" "$TMP/twin2.log"
  fail "two runs started together: status $rc1 and $rc2, folders: ${dirs[*]:-none}"
fi

echo "$passed passed, $failures failed"
((failures == 0))
