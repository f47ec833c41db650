# tests/lib/procs.sh: what the process tests share (sourced, never run):
# the binaries' paths, checks that count failures, processes started on
# loopback ephemeral ports (127.0.0.1, port 0) and stopped whatever happens,
# bounded waits that say what they waited for, and shard-file comparison.
#
# Use from an sh_test that depends on //tests/lib:procs (and lists the
# binaries it runs in data):
#   set -uo pipefail
#   source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"
#
# Sourcing sets ROOT, COORD, SERVER, WORKER, REPORT, PSCTL, CHECKPOINT (paths
# in the runfiles), TMP (the test's scratch folder), JOB_TOKEN (a token file
# that start_coordinator/servers/workers pass to every process), failures
# and passed (0),
# and installs traps: on exit, SIGINT and SIGTERM every process started
# through this file (or passed to procs_track) is stopped (procs_cleanup).
# Functions that start processes set globals (named in each contract), as
# the tests used to inline.
[[ -n "${PSTRAIN_PROCS_SH:-}" ]] && return 0
PSTRAIN_PROCS_SH=1

ROOT="${TEST_SRCDIR:?procs.sh runs under bazel test}/pstrain"
COORD="$ROOT/coordinator/ps_coordinator"
SERVER="$ROOT/server/ps_server"
WORKER="$ROOT/worker/ps_worker"
REPORT="$ROOT/tools/report/ps_report"
PSCTL="$ROOT/psctl"
CHECKPOINT="$ROOT/tools/checkpoint/ps_checkpoint"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
# The job token every process started here carries (processes refuse to
# start without one unless the job file sets security.insecure).
JOB_TOKEN="$TMP/job.token"
(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$JOB_TOKEN")
failures=0
passed=0
PROCS_PIDS=()

# fail MESSAGE: prints "FAIL: MESSAGE" and counts a failed check.
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# ok MESSAGE: prints "ok: MESSAGE" and counts a passed check.
ok() {
  echo "ok: $*"
  passed=$((passed + 1))
}
# now_ms: milliseconds since the epoch.
now_ms() { date +%s%3N; }

# The polling loops below fork nothing (bash builtins, EPOCHREALTIME, a nap
# on a pipe nobody writes): bash forgets the saved exit status of a child
# whose pid a new process reuses, and pids (pid_max 32768) wrap within a
# long test when every 20 ms poll forks date, ps and sleep; exited_within
# then found "not a child" (status 127) for a worker that had exited 0.
# _procs_us: microseconds since the epoch, into _procs_now.
_procs_us() { _procs_now=${EPOCHREALTIME/./}; }
# _procs_nap SECONDS: sleeps without a fork when it can. (The braces keep
# 2>/dev/null off the shell: on exec alone it would stay.)
if ! { exec {PROCS_NAP_FD}<> <(:); } 2>/dev/null; then PROCS_NAP_FD=""; fi
_procs_nap() {
  if [[ -n "$PROCS_NAP_FD" ]]; then
    read -r -t "$1" -u "$PROCS_NAP_FD" _ 2>/dev/null
  else
    sleep "$1"
  fi
  return 0
}

# running PID: whether PID is alive (a zombie, exited but not yet waited
# for, is not). No fork: the state is the field after the last ')' of
# /proc/PID/stat.
running() {
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  read -r stat < "/proc/$1/stat" 2>/dev/null || return 1
  stat=${stat##*) }
  [[ "${stat:0:1}" != Z ]]
}

# procs_track PID...: stop these processes (children of this shell) at exit
# too.
procs_track() { PROCS_PIDS+=("$@"); }

# ours PID: whether PID is a child of this shell (not a process that reused
# the number of one that ended long ago).
ours() { [[ "$(ps -o ppid= -p "$1" 2>/dev/null | tr -d ' ')" == "$$" ]]; }

# procs_cleanup: stops every tracked process still running: SIGTERM (with
# SIGCONT, for a stopped one), so that psctl stops the processes it started,
# then SIGKILL to whatever still runs 5 s later. Idempotent; the traps call
# it.
procs_cleanup() {
  local p alive deadline=$(($(now_ms) + 5000)) live=()
  for p in "${PROCS_PIDS[@]}"; do running "$p" && ours "$p" && live+=("$p"); done
  PROCS_PIDS=("${live[@]}")
  ((${#PROCS_PIDS[@]})) || return 0
  for p in "${PROCS_PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null && kill -CONT "$p" 2>/dev/null
  done
  while (($(now_ms) < deadline)); do
    alive=0
    for p in "${PROCS_PIDS[@]}"; do running "$p" && alive=1; done
    ((alive)) || break
    sleep 0.05
  done
  for p in "${PROCS_PIDS[@]}"; do
    running "$p" && echo "procs.sh: pid $p ignored SIGTERM for 5 s: SIGKILL"
    kill -KILL "$p" 2>/dev/null
  done
  PROCS_PIDS=()
  return 0
}
trap procs_cleanup EXIT
trap 'echo "procs.sh: interrupted"; procs_cleanup; exit 130' INT
trap 'echo "procs.sh: terminated"; procs_cleanup; exit 143' TERM

# wait_for [--while PID] SECONDS WHAT COMMAND...: runs COMMAND every 50 ms
# until it succeeds (returns 0). After SECONDS (whole seconds) it prints
# "timed out after SECONDS s waiting for WHAT" and returns 1; with --while,
# once PID is no longer running it prints "pid PID ended while waiting for
# WHAT" and returns 2 (COMMAND is tried a last time first). Counts no
# failure: the caller decides.
wait_for() {
  local while_pid=""
  if [[ "$1" == --while ]]; then
    while_pid="$2"
    shift 2
  fi
  local seconds="$1" what="$2"
  shift 2
  local _procs_now deadline
  _procs_us
  deadline=$((_procs_now + seconds * 1000000))
  until "$@"; do
    if [[ -n "$while_pid" ]] && ! running "$while_pid"; then
      "$@" && return 0
      echo "pid $while_pid ended while waiting for $what"
      return 2
    fi
    _procs_us
    if ((_procs_now >= deadline)); then
      echo "timed out after $seconds s waiting for $what"
      return 1
    fi
    _procs_nap 0.05
  done
}

# exited_within PID SECONDS: waits up to SECONDS (whole seconds) for PID, a
# child of this shell, to exit; then sets rc to its exit status and returns
# 0. Returns 1 if it still runs (rc unchanged).
exited_within() {
  local pid="$1" _procs_now deadline
  _procs_us
  deadline=$((_procs_now + $2 * 1000000))
  while running "$pid"; do
    _procs_us
    ((_procs_now > deadline)) && return 1
    _procs_nap 0.02
  done
  wait "$pid"
  rc=$?
  return 0
}

# spawn LOG COMMAND...: runs COMMAND in the background with its stderr in
# LOG, tracked; sets spawned to its pid.
spawn() {
  local log="$1"
  shift
  "$@" 2> "$log" &
  spawned=$!
  procs_track "$spawned"
}

# spawn_logged LOG COMMAND...: spawn, with COMMAND's stdout in LOG too.
spawn_logged() {
  local log="$1"
  shift
  "$@" > "$log" 2>&1 &
  spawned=$!
  procs_track "$spawned"
}

# wait_or_stop PID SECONDS WHAT: waits up to SECONDS for PID (a child of
# this shell) and returns its exit status; once it ran SECONDS, says "WHAT:
# still running after SECONDS s; stopping it", sends it SIGTERM (SIGKILL if
# it still runs 10 s later) and returns 124. Sets rc to what it returns.
wait_or_stop() {
  exited_within "$1" "$2" && return "$rc"
  echo "$3: still running after $2 s; stopping it"
  kill -TERM "$1"
  exited_within "$1" 10 || kill -KILL "$1"
  rc=124
  return 124
}

# run_logged SECONDS LOG COMMAND...: COMMAND (a psctl run, say) run to its
# end, but bounded and stopped on SIGTERM to this shell: spawn_logged, then
# wait_or_stop (WHAT: COMMAND's file name and first argument). Sets spawned
# and rc; returns rc.
run_logged() {
  local seconds="$1" log="$2"
  shift 2
  spawn_logged "$log" "$@"
  wait_or_stop "$spawned" "$seconds" "${1##*/} ${2:-}"
}

# file_has FILE PATTERN: whether FILE exists and a line matches PATTERN
# (grep basic regular expression).
file_has() { grep -q -- "$2" "$1" 2>/dev/null; }

# noted OUT LINE: prints the lines of OUT/supervision.txt (the coordinator's
# notes of a job run with --out OUT; their grammar is in
# coordinator/supervision_notes.h) that match LINE as a whole (grep extended
# regular expression), e.g. noted "$dir" "taken over worker 1 from step
# [0-9]+"; returns 1 when none does (or the file is missing).
noted() { grep -xE -- "$2" "$1/supervision.txt" 2>/dev/null; }
# has_note OUT LINE: noted, printing nothing (for wait_for and conditions).
has_note() { noted "$@" > /dev/null; }
# has_note_line OUT LINE: whether OUT/supervision.txt has LINE, a fixed
# string (no pattern: for lines that end in a path).
has_note_line() { grep -qxF -- "$2" "$1/supervision.txt" 2>/dev/null; }
# noted_after OUT FIRST THEN: whether OUT/supervision.txt has a line matching
# THEN after its last line matching FIRST (whole-line extended regular
# expressions, as noted), e.g. a hosted rank's end after its hosting.
noted_after() {
  awk -v first="^($2)\$" -v then="^($3)\$" '
    $0 ~ first { seen = 1; found = 0; next }
    seen && $0 ~ then { found = 1 }
    END { exit !found }' "$1/supervision.txt" 2>/dev/null
}

# replicas_agree OUT N: OUT/supervision.txt notes the end of N ranks, each
# with its weights' fingerprint ("done worker R weights FP", mode
# allreduce), and the N fingerprints are equal; says "FP", else returns 1
# saying what was noted.
replicas_agree() {
  local out="$1" n="$2" lines prints
  lines=$(noted "$out" "done worker [0-9]+ weights [0-9a-f]{16}")
  prints=$(sed 's/.* weights //' <<<"$lines" | sort -u)
  if [[ -n "$lines" && $(grep -c . <<<"$lines") -eq "$n" &&
        $(cut -d' ' -f3 <<<"$lines" | sort -u | grep -c .) -eq "$n" &&
        $(grep -c . <<<"$prints") -eq 1 ]]; then
    echo "$prints"
  else
    echo "done notes: $(noted "$out" "done worker .*" | tr '\n' ';')"
    return 1
  fi
}

# resumed_from OUT AT_LEAST WHAT: after `psctl run --out OUT --resume
# latest`, OUT/supervision.txt notes exactly one resume, "resumed from step
# STEP in OUT/ckpt/step-..." (ckpt_step STEP), with STEP >= AT_LEAST (the
# checkpoint a kill was timed by, or a newer one); says that line, else a
# FAIL naming WHAT and what was noted.
resumed_from() {
  local out="$1" at_least="$2" line step
  line=$(noted "$out" "resumed from step [0-9]+ in .*")
  step=$(sed -n 's/^resumed from step \([0-9]*\) in .*/\1/p' <<<"$line")
  if [[ $(grep -c . <<<"$line") == 1 && -n "$step" ]] && ((step >= at_least)) &&
    [[ "$line" == "resumed from step $step in $out/$(ckpt_step "$step")" ]]; then
    echo "supervision.txt: $line"
  else
    fail "$3: supervision.txt notes no single resume from $out/ckpt at a step >= $at_least: '$line'"
  fi
}

# start_coordinator DIR CONFIG [FLAG...]: a coordinator for job file CONFIG
# on 127.0.0.1 port 0 with --out=DIR and --quiet (and FLAGs), its log in
# DIR/coordinator.log. Waits up to 10 s for the port it got (DIR/port); sets
# coord (its pid) and addr ("127.0.0.1:PORT"). Returns 1, with a FAIL, if it
# did not start.
start_coordinator() {
  local dir="$1" config="$2"
  shift 2
  mkdir -p "$dir"
  spawn "$dir/coordinator.log" "$COORD" --config="$config" --port=0 \
    --port_file="$dir/port" --out="$dir" --quiet --token_file="$JOB_TOKEN" "$@"
  coord=$spawned
  if ! wait_for --while "$coord" 10 "the coordinator's port in $dir/port" \
    test -s "$dir/port"; then
    fail "coordinator did not start: $(tail -2 "$dir/coordinator.log")"
    return 1
  fi
  addr="127.0.0.1:$(cat "$dir/port")"
}

# start_servers DIR N [FLAG...]: N ps_server processes (shards 0..N-1) for
# the coordinator at $addr (with FLAGs), logs in DIR/server-K.log; sets
# servers (their pids).
start_servers() {
  local dir="$1" n="$2" k
  shift 2
  servers=()
  for ((k = 0; k < n; ++k)); do
    spawn "$dir/server-$k.log" "$SERVER" --coordinator="$addr" --shard="$k" \
      --token_file="$JOB_TOKEN" "$@"
    servers+=("$spawned")
  done
}

# start_workers DIR N [FLAG...]: N ps_worker processes (ranks 0..N-1) for
# the coordinator at $addr (with FLAGs), logs in DIR/worker-R.log; sets
# workers (their pids).
start_workers() {
  local dir="$1" n="$2" k
  shift 2
  workers=()
  for ((k = 0; k < n; ++k)); do
    spawn "$dir/worker-$k.log" "$WORKER" --coordinator="$addr" --rank="$k" \
      --token_file="$JOB_TOKEN" "$@"
    workers+=("$spawned")
  done
}

# start_job DIR CONFIG [SERVERS [WORKERS]]: start_coordinator, then SERVERS
# servers and WORKERS workers (2 each by default). Sets coord, addr, servers
# and workers; returns 1 if the coordinator did not start.
start_job() {
  start_coordinator "$1" "$2" || return 1
  start_servers "$1" "${3:-2}"
  start_workers "$1" "${4:-2}"
}

# run_job DIR CONFIG SECONDS [SERVERS [WORKERS]]: an undisturbed job to its
# end: start_job, then waits up to SECONDS for the coordinator to exit 0
# and up to 5 s for each server and worker to exit. Sets coord, addr,
# servers, workers and rc. Returns 1, with a FAIL naming DIR (and the
# coordinator log's last lines), if the job did not start, did not end
# within SECONDS or failed.
run_job() {
  local dir="$1" seconds="$3" p
  start_job "$dir" "$2" "${4:-2}" "${5:-2}" || return 1
  if ! exited_within "$coord" "$seconds"; then
    fail "the job in $dir still runs after $seconds s: $(tail -3 "$dir/coordinator.log")"
    return 1
  fi
  if ((rc != 0)); then
    fail "the job in $dir failed (coordinator exit $rc): $(tail -3 "$dir/coordinator.log")"
    return 1
  fi
  for p in "${servers[@]}" "${workers[@]}"; do exited_within "$p" 5; done
  return 0
}

# metrics_rows_over DIR N: whether DIR/metrics.csv has more than N lines
# (its header and N steps).
metrics_rows_over() {
  (($(wc -l < "$1/metrics.csv" 2>/dev/null || echo 0) > $2))
}

# wait_steps DIR N [SECONDS]: waits (20 s by default) until training is under
# way: DIR/metrics.csv has more than N lines. Returns 1, with a FAIL, if not.
wait_steps() {
  wait_for "${3:-20}" "$2 steps in $1/metrics.csv" metrics_rows_over "$1" "$2" &&
    return 0
  fail "no training progress in $1"
  return 1
}

# summary_ok DIR STEPS: DIR/summary.json (read with ps_report) records a
# job that did not fail and ran all STEPS steps: an "ok" line for each, else
# a FAIL (with the recorded failure).
summary_ok() {
  local failed steps
  failed=$("$REPORT" summary-get "$1" failed 2>&1)
  [[ "$failed" == "false" ]] && ok "summary.json: failed = false" ||
    fail "summary.json failed = '$failed': $("$REPORT" failure "$1" 2>&1)"
  steps=$("$REPORT" summary-get "$1" steps 2>&1)
  [[ "$steps" == "$2" ]] && ok "summary.json: all $2 steps" ||
    fail "summary.json steps = '$steps', want $2"
}

# summary_succeeded DIR WHAT: DIR/summary.json (read with ps_report) records
# a job that did not fail; else a FAIL naming WHAT and the recorded failure.
summary_succeeded() {
  local failed
  failed=$("$REPORT" summary-get "$1" failed 2>&1)
  [[ "$failed" == "false" ]] ||
    fail "$2: summary.json failed = '$failed': $("$REPORT" failure "$1" 2>&1)"
}

# ckpt_step STEP: the checkpoint folder of STEP under a job's --out
# ("ckpt/step-000000000020").
ckpt_step() { printf 'ckpt/step-%012d' "$1"; }

# psctl_start OUT LOG [ARG...]: `psctl run --bin $ROOT --out OUT ARG...` in
# the background, stdout and stderr in LOG, tracked (stopped at exit); sets
# psctl_pid. Wait for it with exited_within.
psctl_start() {
  local out="$1" log="$2"
  shift 2
  spawn_logged "$log" "$PSCTL" run --bin "$ROOT" --out "$out" "$@"
  psctl_pid=$spawned
}

# psctl_run SECONDS OUT LOG [ARG...]: the same, waited for up to SECONDS
# (wait_or_stop): returns psctl's exit status, or 124 (with a line saying
# so) once it ran SECONDS and got SIGTERM (psctl then stops the processes it
# started). Sets psctl_pid and rc.
psctl_run() {
  local seconds="$1" out="$2"
  shift
  psctl_start "$@"
  wait_or_stop "$psctl_pid" "$seconds" "psctl run --out $out"
}

# psctl_compare SECONDS LOG [ARG...]: `psctl compare --bin $ROOT ARG...`,
# its output in LOG, waited for up to SECONDS (run_logged). Sets rc; returns
# psctl's exit status, or 124 once it ran SECONDS.
psctl_compare() {
  local seconds="$1" log="$2"
  shift 2
  run_logged "$seconds" "$log" "$PSCTL" compare --bin "$ROOT" "$@"
}

# psctl_succeeded SECONDS LOG WHAT: waits up to SECONDS for the psctl run
# psctl_pid (its output in LOG) and returns 0 if it exited 0; else a FAIL
# ("WHAT still runs SECONDS s later", or LOG and "WHAT failed (psctl exit
# RC)") and returns 1. Sets rc.
psctl_succeeded() {
  if ! exited_within "$psctl_pid" "$1"; then
    fail "$3 still runs $1 s later"
    return 1
  fi
  ((rc == 0)) && return 0
  cat "$2"
  fail "$3 failed (psctl exit $rc)"
  return 1
}

# psctl_child OUT WHO: the pid of the process that a psctl run with --out OUT
# started for WHO ("--shard=K" or "--rank=R"), found by the run's unique
# token path; empty if there is none.
psctl_child() {
  pgrep -f -- "$2 --metrics_port=0 --token_file=$1/token" | head -1
}

# kill_after_checkpoint OUT STEP WHO [DELAY_MS]: waits (up to 60 s, while
# psctl_pid runs) for the checkpoint of STEP in OUT to be complete (its
# MANIFEST.json), then DELAY_MS (0..999) later SIGKILLs the process psctl
# started for WHO (psctl_child) and says so, naming it as psctl's log does
# ("server-K", "worker-R"). Returns 1, with a FAIL, if it killed nothing.
kill_after_checkpoint() {
  local out="$1" step="$2" who="$3" delay_ms="${4:-0}" pid manifest name="$3"
  [[ "$who" == --shard=* ]] && name="server-${who#--shard=}"
  [[ "$who" == --rank=* ]] && name="worker-${who#--rank=}"
  manifest="$out/$(ckpt_step "$step")/MANIFEST.json"
  wait_for --while "$psctl_pid" 60 "$manifest" test -f "$manifest"
  sleep "$(printf '0.%03d' "$delay_ms")"
  pid=$(psctl_child "$out" "$who")
  if [[ -n "$pid" && -f "$manifest" ]] && running "$psctl_pid"; then
    kill -KILL "$pid"
    echo "killed $name (pid $pid) ${delay_ms} ms after the checkpoint of step $step"
    return 0
  fi
  fail "$name: not killed (the job ended or stalled before the checkpoint of step $step)"
  return 1
}

# kill_twice OUT STEP_1 WHO_1 DELAY_MS_1 STEP_2 WHO_2 DELAY_MS_2: in the
# psctl run (psctl_pid) with --out OUT, kill_after_checkpoint WHO_1, then,
# once the coordinator noted its first rollback in OUT/supervision.txt
# (waited for up to 60 s), WHO_2: the second kill meets a job that recovered
# from the first.
kill_twice() {
  local out="$1"
  kill_after_checkpoint "$out" "$2" "$3" "$4"
  wait_for --while "$psctl_pid" 60 "the first rollback in $out/supervision.txt" \
    has_note "$out" "rolled back generation [0-9]+ to step [0-9]+"
  kill_after_checkpoint "$out" "$5" "$6" "$7"
}

# restarted_after_kills OUT N WHO...: after a psctl run (log in OUT.log)
# under on_failure: restart in which each WHO ("server-K", "worker-R") was
# SIGKILLed: psctl restarted each, the coordinator noted at least N losses
# ("lost GENERATION server|worker ID") and N rollbacks ("rolled back
# generation GENERATION to step STEP") in OUT/supervision.txt (shown). A FAIL for each that is not so. (A process
# starved past its lease on a loaded machine may add a restart of its own:
# more than N is fine.)
restarted_after_kills() {
  local out="$1" n="$2" who lost rolled
  shift 2
  for who in "$@"; do
    # user-facing message check: psctl's line saying it restarted WHO (no
    # file records psctl's restarts).
    grep -q "^psctl: $who (pid [0-9]*) exited with status 137; restarted as pid" "$out.log" ||
      fail "psctl did not restart the killed $who"
  done
  lost=$(noted "$out" "lost [0-9]+ (server|worker) [0-9]+" | wc -l)
  rolled=$(noted "$out" "rolled back generation [0-9]+ to step [0-9]+" | wc -l)
  ((lost >= n)) || fail "supervision.txt notes $lost losses, expected $n"
  ((rolled >= n)) || fail "supervision.txt notes $rolled rollbacks, expected $n"
  sed 's/^/  supervision.txt: /' "$out/supervision.txt" 2>/dev/null
}

# restarted_and_rolled_back OUT SERVER WORKER SURVIVOR: restarted_after_kills
# for server shard SERVER and worker rank WORKER (two kills); and every
# shard, SERVER's replacement among them, rolled back after SERVER's loss
# (the coordinator notes a rollback once every shard did it), and worker
# SURVIVOR resumed in-process (its report said so). A FAIL for each that is
# not so.
restarted_and_rolled_back() {
  local out="$1" server="$2" survivor="$4"
  restarted_after_kills "$out" 2 "server-$server" "worker-$3"
  noted_after "$out" "lost [0-9]+ server $server" "rolled back generation [0-9]+ to step [0-9]+" ||
    fail "supervision.txt notes no rollback after the loss of server-$server"
  has_note "$out" "resumed worker $survivor in generation [0-9]+ at step [0-9]+" ||
    fail "supervision.txt notes no in-process resume of the surviving worker-$survivor"
}

# psctl_undisturbed OUT CONFIG FINAL: the undisturbed run a test compares
# with: psctl_run (120 s, log OUT.log) of CONFIG. If it fails, its log and
# "FAIL: the undisturbed job failed", and the test exits 1; a FAIL when it
# left no checkpoint FINAL (ckpt_step) under OUT.
psctl_undisturbed() {
  if ! psctl_run 120 "$1" "$1.log" --config "$2"; then
    cat "$1.log"
    echo "FAIL: the undisturbed job failed"
    exit 1
  fi
  [[ -f "$1/$3/MANIFEST.json" ]] || fail "no final checkpoint in the undisturbed run"
}

# chaos_seed [LABEL]: seed (and RANDOM) from $CHAOS_SEED, else from the
# clock, said as "[LABEL ]seed N (replay: --test_env=CHAOS_SEED=N)".
chaos_seed() {
  seed="${CHAOS_SEED:-$(($(date +%s%N) % 100000))}"
  echo "${1:+$1 }seed $seed (replay: --test_env=CHAOS_SEED=$seed)"
  RANDOM=$seed
}

# same_files DIR_A DIR_B WHAT FILE...: each FILE in DIR_B is byte-identical
# (cmp) to the one in DIR_A; a FAIL "WHAT: FILE differs" for each that is not.
same_files() {
  local a="$1" b="$2" what="$3" f
  shift 3
  for f in "$@"; do
    cmp -s "$a/$f" "$b/$f" || fail "$what: $f differs from $a/$f"
  done
}

# procs_finish PASSED [FAILED_SUFFIX]: ends the test: with "N check(s)
# failed FAILED_SUFFIX" and status 1 if any check failed, else with the
# line PASSED and status 0.
procs_finish() {
  if ((failures)); then
    echo "$failures check(s) failed${2:+ $2}"
    exit 1
  fi
  echo "$1"
  exit 0
}
