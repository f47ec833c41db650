#!/usr/bin/env bash
# tests/lib/procs.sh itself: bounded waits say what they waited for, exit
# statuses are collected, and every tracked process is stopped when the
# sourcing script exits, fails or gets SIGTERM (a stopped one and one that
# ignores SIGTERM included).
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"
LIB="$ROOT/tests/lib/procs.sh"

# ok counts the checks that passed.
before=$passed
ok "ok prints its message"
((passed == before + 1)) || fail "ok: passed went from $before to $passed"

# wait_for: success, timeout, and the process it waits on ending.
wait_for 5 "true" true && ok "wait_for returns 0 once the command succeeds" ||
  fail "wait_for true did not return 0"
t0=$(now_ms)
out=$(wait_for 1 "the impossible" false)
st=$?
elapsed=$(($(now_ms) - t0))
[[ $st == 1 && "$out" == "timed out after 1 s waiting for the impossible" ]] &&
  ((elapsed >= 1000 && elapsed < 10000)) &&
  ok "wait_for times out after 1 s ($elapsed ms) and says what it waited for" ||
  fail "wait_for 1 false: status $st after $elapsed ms, said '$out'"
sleep 0.3 &
short=$!
out=$(wait_for --while "$short" 10 "the impossible" false)
st=$?
[[ $st == 2 && "$out" == "pid $short ended while waiting for the impossible" ]] &&
  ok "wait_for --while stops when the process ends" ||
  fail "wait_for --while: status $st, said '$out'"

# exited_within: the exit status, and a process still running.
(exit 7) &
exited_within $! 5 && [[ $rc == 7 ]] && ok "exited_within collects exit status 7" ||
  fail "exited_within: rc ${rc:-unset}, want 7"
spawn /dev/null sleep 30
long=$spawned
exited_within "$long" 1 && fail "exited_within: sleep 30 reported exited" ||
  ok "exited_within returns 1 for a process still running"

# psctl_run, on a stand-in for psctl: its exit status, and SIGTERM once it
# runs past the bound.
PSCTL="$TMP/fake_psctl"
cat > "$PSCTL" <<'FAKE'
#!/usr/bin/env bash
echo "args: $*"
[[ "$*" == *--quick* ]] && exit 5
[[ "$*" == *--fine* ]] && exit 0
trap 'kill "$child"; echo stopped; exit 143' TERM
sleep 30 &
child=$!
wait
FAKE
chmod +x "$PSCTL"
psctl_run 10 "$TMP/out" "$TMP/psctl.log" --quick
st=$?
[[ $st == 5 && "$(cat "$TMP/psctl.log")" == "args: run --bin $ROOT --out $TMP/out --quick" ]] &&
  ok "psctl_run returns psctl's exit status (5) and logs its output" ||
  fail "psctl_run: status $st, log '$(cat "$TMP/psctl.log")'"
t0=$(now_ms)
out=$(psctl_run 1 "$TMP/out" "$TMP/psctl.log")
st=$?
elapsed=$(($(now_ms) - t0))
[[ $st == 124 && "$out" == *"still running after 1 s; stopping it" ]] &&
  [[ "$(tail -1 "$TMP/psctl.log")" == stopped ]] && ((elapsed < 5000)) &&
  ok "psctl_run stops a run past its bound with SIGTERM ($elapsed ms)" ||
  fail "psctl_run 1: status $st after $elapsed ms, said '$out', log '$(cat "$TMP/psctl.log")'"

# run_logged: any command, bounded the same way, its stdout and stderr in
# the log.
run_logged 10 "$TMP/run.log" bash -c 'echo out; echo err >&2; exit 4'
st=$?
[[ $st == 4 && $rc == 4 && "$(cat "$TMP/run.log")" == "out"$'\n'"err" ]] &&
  ok "run_logged returns the exit status (4) and logs stdout and stderr" ||
  fail "run_logged: status $st, rc $rc, log '$(cat "$TMP/run.log")'"
t0=$(now_ms)
out=$(run_logged 1 "$TMP/run.log" "$PSCTL" compare)
st=$?
elapsed=$(($(now_ms) - t0))
[[ $st == 124 && "$out" == "fake_psctl compare: still running after 1 s; stopping it" ]] &&
  [[ "$(tail -1 "$TMP/run.log")" == stopped ]] && ((elapsed < 5000)) &&
  ok "run_logged stops a command past its bound with SIGTERM ($elapsed ms)" ||
  fail "run_logged 1: status $st after $elapsed ms, said '$out', log '$(cat "$TMP/run.log")'"
psctl_compare 10 "$TMP/compare.log" --quick
st=$?
[[ $st == 5 && "$(cat "$TMP/compare.log")" == "args: compare --bin $ROOT --quick" ]] &&
  ok "psctl_compare runs psctl compare with --bin and returns its status (5)" ||
  fail "psctl_compare: status $st, log '$(cat "$TMP/compare.log")'"

# psctl_succeeded: 0 for a run that exits 0; a FAIL with the log for one
# that fails, and for one still running past the bound. It waits for a
# child of this shell, so it runs here, not in $(...): checked_run ARG...
# sets out (what it said, and its status and the failures it counted) and
# leaves failures as it was.
checked_run() {
  local before=$failures st
  psctl_start "$TMP/out" "$TMP/psctl.log" "$@"
  psctl_succeeded 1 "$TMP/psctl.log" "the run" > "$TMP/said"
  st=$?
  out=$(cat "$TMP/said"; echo "st=$st counted=$((failures - before))")
  failures=$before
}
checked_run --fine
[[ "$out" == "st=0 counted=0" ]] && ok "psctl_succeeded returns 0 for a run that exits 0" ||
  fail "psctl_succeeded on a run that exits 0 said '$out'"
checked_run --quick
[[ "$out" == "args: run --bin $ROOT --out $TMP/out --quick"$'\n'"FAIL: the run failed (psctl exit 5)"$'\n'"st=1 counted=1" ]] &&
  ok "psctl_succeeded fails a run that exits 5, showing its log" ||
  fail "psctl_succeeded on a run that exits 5 said '$out'"
checked_run
[[ "$out" == "FAIL: the run still runs 1 s later"$'\n'"st=1 counted=1" ]] &&
  ok "psctl_succeeded fails a run still running past its bound" ||
  fail "psctl_succeeded on a long run said '$out'"
kill -TERM "$psctl_pid"
exited_within "$psctl_pid" 5

# psctl_undisturbed, on the stand-in psctl (the config "--fine" exits 0,
# "--quick" 5): a run with its final checkpoint passes, one without it is a
# FAIL, a failing run ends the test (here a subshell) with its log.
mkdir -p "$TMP/calm/ckpt/step-3"
touch "$TMP/calm/ckpt/step-3/MANIFEST.json"
out=$(psctl_undisturbed "$TMP/calm" --fine ckpt/step-3; echo "failures=$failures")
[[ "$out" == "failures=$failures" ]] &&
  ok "psctl_undisturbed passes a run that left its final checkpoint" ||
  fail "psctl_undisturbed on a complete run said '$out'"
out=$(psctl_undisturbed "$TMP/calm" --fine ckpt/step-4; echo "failures=$failures")
[[ "$out" == "FAIL: no final checkpoint in the undisturbed run"$'\n'"failures=$((failures + 1))" ]] &&
  ok "psctl_undisturbed fails a run without its final checkpoint" ||
  fail "psctl_undisturbed on a run without it said '$out'"
out=$( (psctl_undisturbed "$TMP/calm" --quick ckpt/step-3; echo "went on"); echo "st=$?")
[[ "$out" == *"FAIL: the undisturbed job failed"$'\n'"st=1" && "$out" == "args: run"* ]] &&
  ok "psctl_undisturbed ends the test on a failed run, showing its log" ||
  fail "psctl_undisturbed on a failed run said '$out'"

# chaos_seed: from $CHAOS_SEED, said with how to replay it; RANDOM follows.
out=$(CHAOS_SEED=42 chaos_seed chaos; echo "seed=$seed first=$RANDOM")
want_first=$(RANDOM=42; echo $RANDOM)
[[ "$out" == "chaos seed 42 (replay: --test_env=CHAOS_SEED=42)"$'\n'"seed=42 first=$want_first" ]] &&
  ok "chaos_seed takes CHAOS_SEED and seeds RANDOM" || fail "chaos_seed said '$out'"

# same_files counts each differing file.
mkdir -p "$TMP/a" "$TMP/b"
echo 1 > "$TMP/a/x"; echo 1 > "$TMP/b/x"
echo 1 > "$TMP/a/y"; echo 2 > "$TMP/b/y"
out=$(same_files "$TMP/a" "$TMP/b" "cmp" x y; echo "failures=$failures")
[[ "$out" == "FAIL: cmp: y differs from $TMP/a/y"$'\n'"failures=1" ]] &&
  ok "same_files fails on the differing file only" || fail "same_files said '$out'"

# run_job, on stand-ins for the coordinator (writes its port file, runs
# FAKE_S seconds, exits FAKE_RC), the servers and the workers. The
# coordinator closes its stdout, so that $(...) does not wait for it.
COORD="$TMP/fake_coordinator"
cat > "$COORD" <<'FAKE'
#!/usr/bin/env bash
exec > /dev/null
for a in "$@"; do [[ "$a" == --port_file=* ]] && echo 1 > "${a#--port_file=}"; done
echo "coordinator args: $*" >&2
sleep "${FAKE_S:-0.2}"
exit "${FAKE_RC:-0}"
FAKE
SERVER="$TMP/fake_node"
WORKER="$TMP/fake_node"
printf '#!/usr/bin/env bash\nsleep 0.1\n' > "$SERVER"
chmod +x "$COORD" "$SERVER"
out=$(run_job "$TMP/job" job.yaml 5 1 3; echo "st=$? failures=$failures servers=${#servers[@]} workers=${#workers[@]} rc=$rc")
[[ "$out" == "st=0 failures=0 servers=1 workers=3 rc=0" ]] &&
  file_has "$TMP/job/coordinator.log" "coordinator args: --config=job.yaml --port=0" &&
  ok "run_job runs a job of 1 server and 3 workers to its end" ||
  fail "run_job: said '$out', coordinator log '$(cat "$TMP/job/coordinator.log")'"
out=$(export FAKE_RC=1; run_job "$TMP/failed" job.yaml 5; echo "st=$? failures=$failures")
[[ "$out" == "FAIL: the job in $TMP/failed failed (coordinator exit 1): coordinator args: "*$'\n'"st=1 failures=1" ]] &&
  ok "run_job fails a job whose coordinator exits 1" || fail "run_job, exit 1: said '$out'"
t0=$(now_ms)
out=$(export FAKE_S=3; run_job "$TMP/slow" job.yaml 1; echo "st=$? failures=$failures")
elapsed=$(($(now_ms) - t0))
[[ "$out" == "FAIL: the job in $TMP/slow still runs after 1 s: "*$'\n'"st=1 failures=1" ]] &&
  ((elapsed < 2500)) && ok "run_job gives up on a job past its bound ($elapsed ms)" ||
  fail "run_job, past its bound: said '$out' after $elapsed ms"

# start_workers passes the job token and its flags on to every worker.
WORKER="$TMP/fake_args"
printf '#!/usr/bin/env bash\necho "args: $*" >&2\n' > "$WORKER"
chmod +x "$WORKER"
addr="127.0.0.1:1"
mkdir -p "$TMP/flags"
start_workers "$TMP/flags" 2 --peer_port=0 --metrics_port=0
for p in "${workers[@]}"; do exited_within "$p" 5; done
[[ ${#workers[@]} == 2 && "$(cat "$TMP/flags/worker-1.log")" == \
  "args: --coordinator=127.0.0.1:1 --rank=1 --token_file=$JOB_TOKEN --peer_port=0 --metrics_port=0" ]] &&
  ok "start_workers passes its flags to each worker" ||
  fail "start_workers with flags: ${#workers[@]} workers, worker-1 got '$(cat "$TMP/flags/worker-1.log")'"

# kill_after_checkpoint: SIGKILLs the process psctl started for a rank once
# the checkpoint is complete, and names it as psctl does. A stand-in for
# psctl (sleep) and for its worker (a bash that waits without a child).
out_dir="$TMP/killed"
mkdir -p "$out_dir/$(ckpt_step 5)"
touch "$out_dir/$(ckpt_step 5)/MANIFEST.json"
printf '#!/usr/bin/env bash\nexec {x}<> <(:)\nread -r -t 30 -u "$x"\n' > "$TMP/fake_rank"
chmod +x "$TMP/fake_rank"
spawn /dev/null sleep 30
psctl_pid=$spawned
spawn /dev/null "$TMP/fake_rank" --rank=1 --metrics_port=0 --token_file="$out_dir/token"
victim=$spawned
rank_started() { [[ -n "$(psctl_child "$out_dir" --rank=1)" ]]; }
wait_for 5 "the stand-in rank" rank_started
out=$(kill_after_checkpoint "$out_dir" 5 --rank=1)
[[ "$out" == "killed worker-1 (pid $victim) 0 ms after the checkpoint of step 5" ]] &&
  exited_within "$victim" 5 && ((rc == 137)) &&
  ok "kill_after_checkpoint kills worker-1 and says so" ||
  fail "kill_after_checkpoint said '$out' (stand-in pid $victim, rc ${rc:-unset})"
# kill_twice: the second kill only after the coordinator's first rollback.
mkdir -p "$out_dir/$(ckpt_step 10)" "$out_dir/logs"
touch "$out_dir/$(ckpt_step 10)/MANIFEST.json"
spawn /dev/null "$TMP/fake_rank" --rank=1 --metrics_port=0 --token_file="$out_dir/token"
first=$spawned
spawn /dev/null "$TMP/fake_rank" --shard=0 --metrics_port=0 --token_file="$out_dir/token"
second=$spawned
both_started() {
  [[ -n "$(psctl_child "$out_dir" --rank=1)" && -n "$(psctl_child "$out_dir" --shard=0)" ]]
}
wait_for 5 "the stand-ins" both_started
(sleep 1 && echo "rolled back generation 1 to step 5" > "$out_dir/supervision.txt") &
rolled=$!
t0=$(now_ms)
out=$(kill_twice "$out_dir" 5 --rank=1 0 10 --shard=0 0)
elapsed=$(($(now_ms) - t0))
exited_within "$rolled" 5
[[ "$out" == "killed worker-1 (pid $first) 0 ms after the checkpoint of step 5"$'\n'"killed server-0 (pid $second) 0 ms after the checkpoint of step 10" ]] &&
  ((elapsed >= 900)) && ok "kill_twice kills both, the second after the rollback ($elapsed ms)" ||
  fail "kill_twice said '$out' after $elapsed ms"
kill -KILL "$first" "$second" "$psctl_pid" 2>/dev/null
for p in "$first" "$second" "$psctl_pid"; do exited_within "$p" 5; done

# restarted_after_kills: each named process restarted, N losses and N
# rollbacks noted in supervision.txt; one FAIL for each that is not so.
run="$TMP/one_kill"
mkdir -p "$run/logs"
echo "psctl: worker-2 (pid 10) exited with status 137; restarted as pid 11" > "$run.log"
# The coordinator's log wording does not count.
printf '%s\n' "worker 2 lost (lease); generation 1" "rolled back to step 5" > "$run/logs/coordinator.log"
printf '%s\n' "dead worker 2" "lost 1 worker 2" "registered worker 2" \
  "rolled back generation 1 to step 5" > "$run/supervision.txt"
out=$(restarted_after_kills "$run" 1 worker-2 | grep FAIL; echo "failures=$failures")
[[ "$out" == "failures=0" ]] && ok "restarted_after_kills accepts one restart and one rollback" ||
  fail "restarted_after_kills on one kill said '$out'"
out=$(restarted_after_kills "$run" 2 worker-2 worker-0 | grep -c FAIL)
[[ "$out" == 3 ]] && ok "restarted_after_kills fails on a missing restart, loss and rollback" ||
  fail "restarted_after_kills: $out FAIL lines, want 3"
rm "$run/supervision.txt"
out=$(restarted_after_kills "$run" 1 worker-2 | grep FAIL)
[[ "$out" == "FAIL: supervision.txt notes 0 losses, expected 1"$'\n'"FAIL: supervision.txt notes 0 rollbacks, expected 1" ]] &&
  ok "restarted_after_kills counts the losses and rollbacks supervision.txt notes, not log lines" ||
  fail "restarted_after_kills without supervision.txt said '$out'"

# noted: whole lines of supervision.txt only; none (or no file) returns 1.
printf '%s\n' "dead worker 1" "taken over worker 1 from step 12" \
  "taken over worker 10 from step 3" > "$run/supervision.txt"
out=$(noted "$run" "taken over worker 1 from step [0-9]+")
[[ "$out" == "taken over worker 1 from step 12" ]] &&
  ! noted "$run" "worker 1" && ! noted "$TMP/no_such_run" "dead worker 1" &&
  [[ -z "$(has_note "$run" "dead worker 1")" ]] && has_note "$run" "dead worker 1" &&
  ok "noted matches whole supervision.txt lines and fails on none" ||
  fail "noted said '$out'"

# noted_after: THEN after the last FIRST only.
printf '%s\n' "hosted worker 1 by worker 0" "done worker 1 weights 00000000000000aa" \
  "hosted worker 2 by worker 0" > "$run/supervision.txt"
noted_after "$run" "hosted worker 1 by worker 0" "done worker 1 weights .*" &&
  ! noted_after "$run" "hosted worker 2 by worker 0" "done worker 2 weights .*" &&
  ! noted_after "$run" "hosted worker 2 by worker 0" "done worker 1 weights .*" &&
  ! noted_after "$run" "done worker 1 weights .*" "hosted worker 1 by worker 0" &&
  ! noted_after "$TMP/no_such_run" "failed" "failed" &&
  ok "noted_after finds a line only after the last of the first" ||
  fail "noted_after matched the wrong order"
printf '%s\n' "hosted worker 1 by worker 0" "done worker 1 weights 00000000000000aa" \
  "hosted worker 1 by worker 2" > "$run/supervision.txt"
! noted_after "$run" "hosted worker 1 by worker [0-9]+" "done worker 1 .*" &&
  ok "noted_after: an end before a later first does not count" ||
  fail "noted_after counted an end before the last hosting"

# replicas_agree: N distinct ranks' ends, one fingerprint.
agree() { printf '%s\n' "$@" > "$run/supervision.txt"; replicas_agree "$run" 2; }
out=$(agree "done worker 0 weights 0123456789abcdef" "registered worker 3" \
  "done worker 1 weights 0123456789abcdef")
[[ $? == 0 && "$out" == 0123456789abcdef ]] &&
  ok "replicas_agree says the one fingerprint of N ranks" || fail "replicas_agree said '$out'"
for bad in "done worker 0 weights 0123456789abcdef|done worker 1 weights 0123456789abcdee" \
    "done worker 0 weights 0123456789abcdef|done worker 0 weights 0123456789abcdef" \
    "done worker 0 weights 0123456789abcdef|done worker 1" \
    "done worker 0 weights 0123456789abcdef"; do
  IFS='|' read -ra lines <<<"$bad"
  if out=$(agree "${lines[@]}"); then
    fail "replicas_agree accepted '$bad': '$out'"
  else
    ok "replicas_agree refuses '$bad'"
  fi
done

# has_note_line: a fixed whole line (a path's dots are no pattern).
printf '%s\n' "saved checkpoint of step 80 in /r.a/ckpt/step-80" > "$run/supervision.txt"
has_note_line "$run" "saved checkpoint of step 80 in /r.a/ckpt/step-80" &&
  ! has_note_line "$run" "saved checkpoint of step 80 in /rxa/ckpt/step-80" &&
  ! has_note_line "$run" "saved checkpoint of step 8" &&
  ! has_note_line "$TMP/no_such_run" "failed" &&
  ok "has_note_line matches one whole fixed line" || fail "has_note_line matched the wrong lines"

# resumed_from: one resume, from OUT/ckpt, at a step >= AT_LEAST.
resume_at() {
  printf '%s\n' "saved checkpoint of step 20 in $run/$(ckpt_step 20)" "$@" > "$run/supervision.txt"
  resumed_from "$run" 20 "the job"
}
out=$(resume_at "resumed from step 30 in $run/$(ckpt_step 30)"; echo "failures=$failures")
[[ "$out" == "supervision.txt: resumed from step 30 in $run/$(ckpt_step 30)"$'\n'"failures=0" ]] &&
  ok "resumed_from accepts a resume from a newer checkpoint of OUT" ||
  fail "resumed_from on a good resume said '$out'"
for bad in "resumed from step 10 in $run/$(ckpt_step 10)" "resumed from step 30 in /elsewhere/$(ckpt_step 30)" \
  "resumed from step 30 in $run/$(ckpt_step 20)" ""; do
  out=$(resume_at "$bad"; echo "failures=$failures")
  [[ "$out" == "FAIL: the job: supervision.txt notes no single resume from $run/ckpt at a step >= 20: '$bad'"$'\n'"failures=1" ]] &&
    ok "resumed_from fails '$bad'" || fail "resumed_from on '$bad' said '$out'"
done
out=$(resume_at "resumed from step 20 in $run/$(ckpt_step 20)" "resumed from step 30 in $run/$(ckpt_step 30)" | grep -c FAIL)
[[ "$out" == 1 ]] && ok "resumed_from fails two resumes" || fail "resumed_from on two resumes: $out FAIL lines"

# summary_ok, on a stand-in for ps_report that answers from REPORT_FAILED
# and REPORT_STEPS.
REPORT="$TMP/fake_report"
cat > "$REPORT" <<'FAKE'
#!/usr/bin/env bash
case "$1 ${3:-}" in
  "summary-get failed") echo "$REPORT_FAILED" ;;
  "summary-get steps") echo "$REPORT_STEPS" ;;
  "failure ") echo "worker 1: dead" ;;
esac
FAKE
chmod +x "$REPORT"
out=$(export REPORT_FAILED=false REPORT_STEPS=40; summary_ok "$TMP" 40; echo "failures=$failures")
[[ "$out" == "ok: summary.json: failed = false"$'\n'"ok: summary.json: all 40 steps"$'\n'"failures=0" ]] &&
  ok "summary_ok accepts a job that ran all its steps" || fail "summary_ok on a good summary said '$out'"
out=$(export REPORT_FAILED=true REPORT_STEPS=12; summary_ok "$TMP" 40; echo "failures=$failures")
[[ "$out" == "FAIL: summary.json failed = 'true': worker 1: dead"$'\n'"FAIL: summary.json steps = '12', want 40"$'\n'"failures=2" ]] &&
  ok "summary_ok fails a failed job and a missing step" || fail "summary_ok on a failed job said '$out'"

# restarted_and_rolled_back: silent on a recovered run, one FAIL for each
# missing trace otherwise (psctl's restart lines; the notes, not the logs).
run="$TMP/run"
mkdir -p "$run/logs"
printf '%s\n' "psctl: server-1 (pid 10) exited with status 137; restarted as pid 11" \
  "psctl: worker-0 (pid 12) exited with status 137; restarted as pid 13" > "$run.log"
printf '%s\n' "server 1 lost (lease); generation 1" "rolled back to step 4" \
  "worker 0 lost (replaced); generation 2" "rolled back to step 8" > "$run/logs/coordinator.log"
printf '%s\n' "dead server 1" "lost 1 server 1" "rolled back generation 1 to step 4" \
  "resumed worker 1 in generation 1 at step 4" \
  "lost 2 worker 0" "rolled back generation 2 to step 8" > "$run/supervision.txt"
out=$(restarted_and_rolled_back "$run" 1 0 1 | grep FAIL; echo "failures=$failures")
[[ "$out" == "failures=0" ]] && ok "restarted_and_rolled_back accepts a recovered run" ||
  fail "restarted_and_rolled_back on a recovered run said '$out'"
sed -i '/^resumed worker 1/d' "$run/supervision.txt"
sed -i '/worker-0/d' "$run.log"
out=$(restarted_and_rolled_back "$run" 1 0 1 | grep -c FAIL)
[[ "$out" == 2 ]] && ok "restarted_and_rolled_back fails on a missing restart and resume" ||
  fail "restarted_and_rolled_back: $out FAIL lines, want 2"
printf '%s\n' "psctl: worker-0 (pid 12) exited with status 137; restarted as pid 13" >> "$run.log"
printf '%s\n' "lost 1 worker 0" "rolled back generation 1 to step 4" "lost 2 worker 0" \
  "rolled back generation 2 to step 8" "resumed worker 1 in generation 2 at step 8" \
  "lost 3 server 1" > "$run/supervision.txt"
out=$(restarted_and_rolled_back "$run" 1 0 1 | grep FAIL)
[[ "$out" == "FAIL: supervision.txt notes no rollback after the loss of server-1" ]] &&
  ok "restarted_and_rolled_back fails when no rollback follows the server's loss" ||
  fail "restarted_and_rolled_back without a rollback after the server's loss said '$out'"

# Sourcing leaves the script's stderr where it was.
out=$(bash -c "source '$LIB'; echo to-stderr >&2" 2>&1)
[[ "$out" == to-stderr ]] && ok "a script that sources procs.sh keeps its stderr" ||
  fail "a script that sources procs.sh wrote '$out' to stderr, want 'to-stderr'"

# Cleanup: a script that exits with a failure, one killed by SIGTERM, each
# with a running, a stopped and a SIGTERM-ignoring process.
child() {  # $1: how the script ends
  cat > "$TMP/child.sh" <<CHILD
source "$LIB"
spawn /dev/null sleep 60; echo \$spawned > "$TMP/pids"
spawn /dev/null sleep 60; kill -STOP \$spawned; echo \$spawned >> "$TMP/pids"
spawn /dev/null bash -c 'trap "" TERM; exec sleep 60'; echo \$spawned >> "$TMP/pids"
sleep 0.2  # the trap of the last one is set
$1
CHILD
  bash "$TMP/child.sh"
}
for how in "exit 3" "kill -TERM \$\$; wait"; do
  rm -f "$TMP/pids"
  t0=$(now_ms)
  out=$(child "$how")
  st=$?
  elapsed=$(($(now_ms) - t0))
  alive=()
  for p in $(cat "$TMP/pids"); do running "$p" && alive+=("$p"); done
  want=3
  [[ "$how" == kill* ]] && want=143
  [[ $st == $want && ${#alive[@]} == 0 && "$(wc -l < "$TMP/pids")" == 3 ]] &&
    [[ "$out" == *"ignored SIGTERM for 5 s: SIGKILL"* ]] && ((elapsed < 9000)) &&
    ok "'$how': status $st, all 3 processes stopped within $elapsed ms" ||
    fail "'$how': status $st (want $want), still running: ${alive[*]:-none}, said '$out'"
  kill -KILL "${alive[@]}" 2>/dev/null
done

procs_finish "all procs.sh checks passed"
