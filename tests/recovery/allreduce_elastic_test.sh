#!/usr/bin/env bash
# training.on_failure: elastic in mode allreduce under `psctl run`
# (docs/failures-and-recovery.md, "Elastic workers"), with real processes on
# loopback ephemeral ports. A 3-rank gRPC ring checkpoints every 5 steps; a
# seeded random rank is SIGKILLed a seeded random delay after a seeded
# checkpoint (CHAOS_SEED=N replays a draw):
#  1. training.max_restarts 0, so psctl leaves it dead: once its lease runs
#     out a live worker hosts the rank as a second ring member, every rank
#     rolls back to the newest checkpoint and the ring re-forms with 3
#     members;
#  2. training.max_restarts 1: the same, then psctl starts the worker again,
#     its registration takes the rank back from its host with one more
#     rollback;
#  3. training.max_restarts 0, and the host is SIGKILLed too once the ring
#     re-formed: the last live worker hosts both ranks (three ring members
#     in one process).
# Each job ends with a final checkpoint byte-identical (cmp) to the
# undisturbed run's.
set -uo pipefail

source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # PSCTL, TMP, psctl_run, ...

chaos_seed
steps=60
victim=$((RANDOM % 3))
kill_step=$((5 * (2 + RANDOM % 3))) # 10..20
delay_ms=$((RANDOM % 100))
echo "plan: SIGKILL worker-$victim ${delay_ms} ms after the checkpoint of step $kill_step"

# Adam on a cosine schedule: slots and schedule step must come back too.
# checkpoint.keep 0 keeps every manifest, which the kill is timed by.
job() {
  cat <<EOF2
job: {name: allreduce-elastic, workers: 3}
training:
  mode: allreduce
  optimizer: adam
  base_lr: 0.01
  lr_schedule: cosine
  warmup_steps: 5
  local_batch: 16
  steps: $steps
  on_failure: elastic
  min_workers: $2
  max_restarts: $1
  restart_timeout_s: 20
model: {type: mlp, input_dim: 16, hidden: [24], num_classes: 4, seed: 5}
data: {source: synthetic, seed: 9, num_features: 16, num_classes: 4, test_examples: 200}
worker: {compute_ms: ${3:-25}}
network: {lease_s: 2}
allreduce: {timeout_s: 20}
checkpoint: {every_steps: 5, keep: 0}
EOF2
}
job 0 2 > "$TMP/hosted.yaml"
# The newcomer's variant computes slower (emulated compute changes no
# result): psctl starts the new process lease_s + 1 s after the kill, and the
# job must still be running when it registers, even on a loaded machine.
job 1 2 150 > "$TMP/newcomer.yaml"
job 0 1 > "$TMP/rehosted.yaml"
# The live ranks in order; departed rank d goes to the (d mod 2)-th.
live=()
for r in 0 1 2; do ((r != victim)) && live+=("$r"); done
host=${live[victim % 2]}
last=${live[1 - victim % 2]}
final=$(ckpt_step "$steps")
file="shard-00000-of-00001.ckpt"

# The undisturbed job (max_restarts changes nothing without a failure).
psctl_undisturbed "$TMP/calm" "$TMP/hosted.yaml" "$final"

# run_killed NAME CONFIG [THEN]: the job with the victim killed (then
# command THEN, e.g. another kill); checks what every variant shares.
run_killed() {
  local dir="$TMP/$1"
  psctl_start "$dir" "$dir.log" --config "$2"
  kill_after_checkpoint "$dir" "$kill_step" "--rank=$victim" "$delay_ms"
  [[ -n "${3:-}" ]] && "$3" "$dir"
  psctl_succeeded 120 "$dir.log" "$1: the job with a killed worker"
  grep -qE "^lost [0-9]+ worker $victim\$" "$dir/supervision.txt" &&
    ok "$1: the coordinator declared worker $victim lost (supervision.txt)" ||
    fail "$1: supervision.txt notes no loss of worker $victim: $(cat "$dir/supervision.txt" 2>&1)"
  has_note "$dir" "hosted worker $victim by worker $host" &&
    ok "$1: rank $victim hosted by the live worker-$host (supervision.txt)" ||
    fail "$1: supervision.txt notes no hosting of rank $victim by worker $host: $(cat "$dir/supervision.txt" 2>&1)"
  sed 's/^/  supervision.txt: /' "$dir/supervision.txt"
  if [[ -f "$dir/$final/MANIFEST.json" ]]; then
    same_files "$TMP/calm/$final" "$dir/$final" "$1: the undisturbed run against this one" "$file"
  else
    fail "$1: no final checkpoint"
  fi
  summary_succeeded "$dir" "$1"
}

# 1. No replacement: the host keeps the rank to the end.
run_killed hosted "$TMP/hosted.yaml"
# user-facing message check: psctl says it left the killed worker dead.
grep -q "^psctl: worker-$victim (pid [0-9]*) exited with status 137; not restarted" "$TMP/hosted.log" ||
  fail "hosted: psctl did not leave worker-$victim dead: $(grep '^psctl:' "$TMP/hosted.log" | tail -3)"
rolled=$(noted "$TMP/hosted" "rolled back generation [0-9]+ to step [0-9]+" | wc -l)
((rolled == 1)) && ok "hosted: one rollback" || fail "hosted: $rolled rollbacks, expected 1"
# The hosted rank's end (its final report, after its hosting: no new
# process took it back) and every replica's final weights agree.
noted_after "$TMP/hosted" "hosted worker $victim by worker $host" "done worker $victim weights .*" &&
  ok "hosted: the host's second ring member finished the job" ||
  fail "hosted: no hosted member finished rank $victim: $(cat "$TMP/hosted/supervision.txt" 2>&1)"
prints=$(replicas_agree "$TMP/hosted" 3) && ok "hosted: 3 replicas agree: $prints" ||
  fail "hosted: replica fingerprints differ or are missing: $prints"

# 2. The worker comes back and takes its rank back.
run_killed newcomer "$TMP/newcomer.yaml"
# user-facing message check: psctl says it restarted the killed worker.
grep -q "^psctl: worker-$victim (pid [0-9]*) exited with status 137; restarted as pid [0-9]* to rejoin its rank" "$TMP/newcomer.log" ||
  fail "newcomer: psctl did not restart worker-$victim: $(grep '^psctl:' "$TMP/newcomer.log" | tail -3)"
# The take-back: worker-$victim's new process registered for its rank after a
# live worker hosted it (an adoption is no registration).
noted "$TMP/newcomer" "(hosted worker $victim by worker [0-9]+|registered worker $victim)" | tail -1 |
  grep -qx "registered worker $victim" &&
  ok "newcomer: the new worker-$victim took its rank back" ||
  fail "newcomer: no registration of rank $victim after its hosting (supervision.txt)"
rolled=$(noted "$TMP/newcomer" "rolled back generation [0-9]+ to step [0-9]+" | wc -l)
((rolled == 2)) && ok "newcomer: two rollbacks" || fail "newcomer: $rolled rollbacks, expected 2"

# 3. The host dies too, after the ring re-formed with its second member.
kill_host() {
  local step
  wait_for --while "$psctl_pid" 60 "the first rollback" \
    has_note "$1" "rolled back generation [0-9]+ to step [0-9]+"
  step=$(noted "$1" "rolled back generation [0-9]+ to step [0-9]+" | head -1)
  step=${step##* }
  kill_after_checkpoint "$1" "$((step + 5))" "--rank=$host" 0
}
run_killed rehosted "$TMP/rehosted.yaml" kill_host
# worker-$last hosts both ranks, and each ends after that hosting.
ended=0
for r in "$victim" "$host"; do
  has_note "$TMP/rehosted" "hosted worker $r by worker $last" ||
    fail "rehosted: worker-$last does not host rank $r (supervision.txt)"
  noted_after "$TMP/rehosted" "hosted worker $r by worker $last" "done worker $r weights .*" &&
    ended=$((ended + 1))
done
((ended == 2)) &&
  ok "rehosted: worker-$last ran ranks $victim and $host to the end beside its own" ||
  fail "rehosted: worker-$last did not finish both hosted ranks: $(cat "$TMP/rehosted/supervision.txt" 2>&1)"
prints=$(replicas_agree "$TMP/rehosted" 3) && ok "rehosted: 3 replicas agree: $prints" ||
  fail "rehosted: replica fingerprints differ or are missing: $prints"

procs_finish "PASS: worker-$victim SIGKILLed and hosted by worker-$host (then taken back by its new process; then, worker-$host killed too, both hosted by worker-$last); final weights bit-identical (seed $seed)" \
  "(seed $seed)"
