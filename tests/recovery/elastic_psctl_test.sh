#!/usr/bin/env bash
# training.on_failure: elastic in mode sync under `psctl run`
# (docs/failures-and-recovery.md, "Elastic workers"): a worker is SIGKILLed at a
# random step (seed printed; CHAOS_SEED=N replays it). psctl starts it again
# once its lease has run out; meanwhile worker 0 stands in for its rank, and the
# new process takes the rank back by a handover. The job ends with final shard
# files byte-identical (cmp) to the undisturbed run's.
set -uo pipefail

source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # PSCTL, TMP, psctl_run, ...

chaos_seed
steps=150
kill_step=$((10 * (1 + RANDOM % 4)))  # 10..40
delay_ms=$((RANDOM % 100))
echo "plan: SIGKILL worker-1 ${delay_ms} ms after the checkpoint of step $kill_step"

# checkpoint.keep 0 keeps every manifest, which the kill is timed by.
cat > "$TMP/job.yaml" <<EOF2
job: {name: elastic-psctl, workers: 2, servers: 2}
training: {mode: sync, steps: $steps, local_batch: 8, optimizer: adam, base_lr: 0.01, on_failure: elastic, min_workers: 1, max_restarts: 2}
model: {type: mlp, input_dim: 8, hidden: [16], num_classes: 3, seed: 1}
data: {source: synthetic, num_features: 8, num_classes: 3, seed: 3, test_examples: 100}
worker: {compute_ms: 20}
server: {chunk_bytes: 256}
network: {lease_s: 1.5, barrier_timeout_s: 30}
checkpoint: {every_steps: 10, keep: 0}
EOF2
final=$(ckpt_step "$steps")

# 1. The undisturbed job.
psctl_undisturbed "$TMP/calm" "$TMP/job.yaml" "$final"

# 2. The same job, worker 1 killed.
dir="$TMP/elastic"
psctl_start "$dir" "$dir.log" --config "$TMP/job.yaml"
kill_after_checkpoint "$dir" "$kill_step" "--rank=1" "$delay_ms"
psctl_succeeded 120 "$dir.log" "the job with a killed worker"
# user-facing message check: psctl says when and how it started worker-1
# again (no file records psctl's restarts).
grep -q "^psctl: worker-1 (pid [0-9]*) exited with status 137; starting it again in" "$dir.log" &&
  grep -q "^psctl: worker-1 (pid [0-9]*) exited with status 137; restarted as pid [0-9]* to rejoin its rank" "$dir.log" &&
  ok "psctl started worker-1 again after its lease" ||
  fail "psctl did not restart worker-1: $(grep '^psctl:' "$dir.log" | tail -3)"
# The coordinator's notes (supervision.txt, coordinator/supervision_notes.h):
# worker 1's death, its rank's takeover by the stand-in, the stand-in's
# release and the new process's rejoin where the stand-in stopped.
notes="$(sed 's/^/  /' "$dir/supervision.txt" 2>&1)"
has_note "$dir" "dead worker 1" &&
  ok "the coordinator declared worker 1 dead" ||
  fail "supervision.txt notes no death of worker 1:"$'\n'"$notes"
line=$(noted "$dir" "taken over worker 1 from step [0-9]+ by worker 0" | head -1)
[[ -n "$line" ]] && ok "supervision.txt: $line" ||
  fail "worker 1's rank was not taken over by its stand-in:"$'\n'"$notes"
released=$(noted "$dir" "released worker 1 before step [0-9]+" | tail -1)
rejoined=$(noted "$dir" "rejoined worker 1 from step [0-9]+" | tail -1)
[[ -n "$released" && "${released##* }" == "${rejoined##* }" ]] &&
  ok "supervision.txt: $released; $rejoined" ||
  fail "no handover of rank 1 (released '$released', rejoined '$rejoined'):"$'\n'"$notes"
# worker 1's first registration and its new process's; the stand-in's
# adoption is none.
(( $(noted "$dir" "registered worker 1" | wc -l) >= 2 )) &&
  ok "supervision.txt: worker 1 registered at its start and again at its rejoin" ||
  fail "supervision.txt: worker 1 registered fewer than twice:"$'\n'"$notes"

# 3. Bit for bit: the final checkpoint's shard files.
if [[ -f "$dir/$final/MANIFEST.json" ]]; then
  same_files "$TMP/calm/$final" "$dir/$final" "the undisturbed run against the elastic one" \
    shard-00000-of-00002.ckpt shard-00001-of-00002.ckpt
else
  fail "the job with a killed worker has no final checkpoint"
fi
summary_succeeded "$dir" "the job with kills"

procs_finish "PASS: worker-1 SIGKILLed, restarted by psctl, handed its rank back; final weights bit-identical (seed $seed)" \
  "(seed $seed)"
