#!/usr/bin/env bash
# training.clock model in mode async (docs/studies.md, "Model clock"), as
# real jobs of separate processes through `psctl compare`: 2 workers, rank 1
# a persistent 3x straggler, 20 model steps, emulated compute 20 ms.
#  1. Unbounded async: the fast worker trains more steps of its own than
#     the straggler (order, not time), together at least N x 20 pushes; the
#     rows are the 20 model steps and the final evaluation, 20 x the global
#     batch samples in all.
#  2. SSP s = 1: the fast worker stays within s + 1 clocks of the
#     straggler and the job ends with the same rows. (That the servers
#     release a pull held by a finished worker's clock once the model is
#     done is checked deterministically by server:shard_test
#     ModelClockReleasesHeldReadsWhenTheModelIsDone: in a real job the
#     straggler's pull seldom comes after the completing push.)
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # REPORT, TMP, psctl_compare, ...

STEPS=20
col() { "$REPORT" metrics-get "$1" "$2"; }
# The steps worker W trained, from its log line "model clock: K steps ...".
# Log check: the worker's own count, which no file carries.
own_steps() {
  sed -n 's/.*model clock: \([0-9][0-9]*\) steps of this worker.s own.*/\1/p' \
    "$1/logs/worker-$2.log"
}

check_run() {  # label dir: the rows and samples of a model-clock run
  local label="$1" dir="$2"
  local steps rows gb samples final
  steps="$(col "$dir/metrics.csv" step | tr '\n' ' ')"
  rows="$(seq 0 "$STEPS" | tr '\n' ' ')"
  gb="$("$REPORT" summary-get "$dir" global_batch)"
  samples="$("$REPORT" summary-get "$dir" samples)"
  final="$(col "$dir/metrics.csv" eval_accuracy | tail -1)"
  if [[ "$steps" == "$rows" && "$samples" == "$((STEPS * gb))" && -n "$final" ]]; then
    ok "$label: rows 0..$STEPS (model steps and the final evaluation, accuracy $final), $samples samples"
  else
    fail "$label: rows '$steps' (want '$rows'), samples $samples (want $((STEPS * gb))), final accuracy '$final'"
  fi
}

run() {  # name modes
  psctl_compare 180 "$TMP/$1.log" --config "$ROOT/configs/default.yaml" --modes "$2" \
    --workers 2 --steps "$STEPS" --compute-ms 20 --straggler 1:3 --eval-every 5 \
    --set training.clock=model --timeout 60 --out "$TMP/$1"
}

# 1. Unbounded async.
if run inf async:inf; then
  dir="$TMP/inf/runs/async-inf"
  k0="$(own_steps "$dir" 0)" k1="$(own_steps "$dir" 1)"
  if [[ -n "$k0" && -n "$k1" ]] && ((k0 > k1 && k0 + k1 >= 2 * STEPS)); then
    ok "async:inf: the fast worker trained $k0 steps, the straggler $k1 (>= $((2 * STEPS)) pushes)"
  else
    fail "async:inf: own steps '$k0' (fast) and '$k1' (straggler)"
  fi
  check_run async:inf "$dir"
  # user-facing message check: the report says which clock the run used.
  grep -q 'model clock' "$TMP/inf/report.md" || fail "report.md does not say the model clock was used"
else
  cat "$TMP/inf.log"; fail "the async:inf model-clock run failed"
fi

# 2. SSP s = 1: held pulls are released once the model is done.
if run ssp async:1; then
  dir="$TMP/ssp/runs/async-1"
  k0="$(own_steps "$dir" 0)" k1="$(own_steps "$dir" 1)"
  if [[ -n "$k0" && -n "$k1" ]] && ((k0 + k1 >= 2 * STEPS && k0 <= k1 + 3)); then
    ok "async:1: ended (own steps $k0 and $k1, at most s + 2 apart)"
  else
    fail "async:1: own steps '$k0' and '$k1'"
  fi
  check_run async:1 "$dir"
else
  cat "$TMP/ssp.log"; fail "the async:1 model-clock run failed"
fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
