#!/usr/bin/env bash
# `psctl run`'s plan step (issue 11 #8, #9, #10; issue 22): an explicitly
# given --servers/--workers/--steps 0, or a job a process would refuse at
# start-up (--steps within the warm-up), is rejected by name, default output folders
# are never shared, and a missing or malformed data file or a model that does
# not fit the data is found before any process is launched.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # ROOT, TMP, psctl_run, ...

# A private copy of psctl (run with --bin $ROOT): its folder is its root, so
# runs/ lands in $TMP.
PSCTL_HOME="$TMP/root"
mkdir -p "$PSCTL_HOME"
cp "$PSCTL" "$PSCTL_HOME/psctl"
PSCTL="$PSCTL_HOME/psctl"
CONFIG="$ROOT/configs/default.yaml"

# Expects `psctl run ARGS...` to exit 2 naming $1 without launching anything
# (no coordinator log in its output folder).
expect_rejected() {
  local want="$1" name="$2"; shift 2
  local out="$TMP/$name"
  psctl_run 60 "$out" "$TMP/$name.log" "$@"
  if ((rc != 2)); then
    cat "$TMP/$name.log"; fail "$name: exit status $rc, want 2"
  # user-facing message check: the error names the flag, key or file.
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
# Issue 22: a rule a process enforces when it starts is checked here too (the
# servers used to exit 1 on it after every process had started):
# configs/default.yaml decays a cosine over the steps after a 10-step warm-up.
expect_rejected "--steps: training.steps: must exceed training.warmup_steps (10)" \
  steps_below_warmup --config "$CONFIG" --steps 5
sed 's/^  noise: .*/  noise: 1.5/' "$CONFIG" >"$TMP/noise.yaml"
grep -q '^  noise: 1.5' "$TMP/noise.yaml" || fail "configs/default.yaml has no data.noise line to edit"
expect_rejected "data.noise: must be <= 1" noise_above_1 --config "$TMP/noise.yaml"

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
if psctl_run 120 "$TMP/fits" "$TMP/fits.log" --config "$TMP/fits.yaml" --steps 4 &&
    [[ "$("$REPORT" summary-get "$TMP/fits" steps)" == 4 ]]; then
  ok "csv job with a fitting model runs 4 steps (--steps honoured)"
else
  cat "$TMP/fits.log"; fail "csv job with a fitting model"
fi

# Processes on cores (common/cpu_placement.h): the first log line says where
# each runs. One worker with a compute thread per CPU stays free; the
# server gets the last allowed CPU of its own (where there are two or more).
# user-facing message check: psctl's plan line names each process's CPUs.
cpus=$(/usr/bin/python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0)))))')
last=${cpus##*,}
want_server="servers on CPUs $last, workers on CPUs unpinned"
[[ "$cpus" == *,* ]] || want_server="servers on CPUs unpinned, workers on CPUs unpinned"
if grep -qF -- "$want_server" "$TMP/fits.log"; then
  ok "placement (CPUs $cpus): $want_server"
else
  cat "$TMP/fits.log"; fail "placement: no '$want_server' in the log (CPUs $cpus)"
fi
# user-facing message check: with --pin-cores off the plan line says so.
if psctl_run 120 "$TMP/unpinned" "$TMP/unpinned.log" --config "$TMP/fits.yaml" --steps 4 \
    --pin-cores off &&
    grep -qF "servers on CPUs unpinned, workers on CPUs unpinned" "$TMP/unpinned.log"; then
  ok "--pin-cores off leaves every process to the scheduler"
else
  cat "$TMP/unpinned.log"; fail "--pin-cores off"
fi
expect_rejected "--pin-cores: expected on or off, got 'yes'" pin_bad --config "$TMP/fits.yaml" \
  --pin-cores yes

# #9: two runs without --out started together get two folders, both succeed.
spawn_logged "$TMP/twin1.log" "$PSCTL" run --bin "$ROOT" --config "$TMP/fits.yaml"
p1=$spawned
spawn_logged "$TMP/twin2.log" "$PSCTL" run --bin "$ROOT" --config "$TMP/fits.yaml"
p2=$spawned
wait_or_stop "$p1" 120 "the first twin"
rc1=$rc
wait_or_stop "$p2" 120 "the second twin"
rc2=$rc
mapfile -t dirs < <(find "$PSCTL_HOME/runs" -mindepth 1 -maxdepth 1 -type d | sort)
if ((rc1 == 0 && rc2 == 0)) && ((${#dirs[@]} == 2)) &&
    [[ -s "${dirs[0]}/summary.json" && -s "${dirs[1]}/summary.json" ]]; then
  ok "two runs started together: ${dirs[*]##*/}"
else
  cat "$TMP/twin1.log" "$TMP/twin2.log"
  fail "two runs started together: status $rc1 and $rc2, folders: ${dirs[*]:-none}"
fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
