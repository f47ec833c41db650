#!/usr/bin/env bash
# Soak (issue 23; docs/security.md, "Tests"): a stranger at every port of a
# running sync job. A coordinator, 2 ps_server and 2 ps_worker processes on
# loopback ephemeral ports (each with its /metrics port too) train a job
# stretched by emulated compute, once undisturbed and once while
# tests/stranger's ps_stranger, holding no token, spends SOAK_SECONDS (60)
# opening idle and junk streams, made-up calls and unfinished HTTP/2
# connections on every port the five processes listen on (found in
# /proc/net/tcp; the coordinator's is DIR/port and the shards' are the
# coordinator's "server shard K registered at ADDR" lines, checked to be
# among them). Then:
#  - the disturbed job succeeded (summary.json failed = false, all steps)
#    and was still training when the stranger stopped;
#  - its final shard files are byte-identical (cmp) to the undisturbed run's;
#  - the stranger exited 0: no call but health returned OK, and every gRPC
#    port answered it UNAUTHENTICATED;
#  - each process's peak RSS (VmHWM, sampled every 0.5 s while it ran)
#    under the stranger is at most RSS_FACTOR (2) times its peak in the
#    undisturbed run (both printed).
# SOAK_SECONDS (5..600, whole seconds) shortens it for a developer:
#   bazel test //tests/stranger:stranger_soak_test --test_env=SOAK_SECONDS=15
set -uo pipefail

source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh"  # REPORT, TMP, start_*, ...

STRANGER="$ROOT/tests/stranger/ps_stranger"
SOAK_SECONDS="${SOAK_SECONDS:-60}"
if ! [[ "$SOAK_SECONDS" =~ ^[0-9]+$ ]] || ((SOAK_SECONDS < 5 || SOAK_SECONDS > 600)); then
  echo "FAIL: SOAK_SECONDS must be whole seconds in 5..600, got '$SOAK_SECONDS'"
  exit 1
fi
# The bound on each process's peak RSS under the stranger: this many times
# its own undisturbed peak (measured: 1.5x for the coordinator, 1.05x for
# the others; docs/security.md, "Tests").
RSS_FACTOR=2
# About 17 steps a second undisturbed (50 ms of emulated compute and a few
# ms of pushes and pulls); 10 s more than the stranger acts, so that the job
# outlasts it even undisturbed. A loaded machine only makes steps slower.
STEPS=$(((SOAK_SECONDS + 10) * 17))
final=$(ckpt_step "$STEPS")
echo "soak: $SOAK_SECONDS s of a stranger, a job of $STEPS steps;" \
  "peak RSS bound: ${RSS_FACTOR}x each process's undisturbed peak"

cat > "$TMP/job.yaml" <<YAML
job: {name: soak, workers: 2, servers: 2}
training: {mode: sync, steps: $STEPS, local_batch: 16, optimizer: adam, base_lr: 0.01}
model: {type: mlp, input_dim: 16, hidden: [32], num_classes: 4, seed: 5}
data: {source: synthetic, seed: 9, num_features: 16, num_classes: 4, test_examples: 200}
worker: {compute_ms: 50}
server: {chunk_bytes: 256}
checkpoint: {every_steps: $STEPS}
YAML

rows() { wc -l < "$1/metrics.csv" 2>/dev/null || echo 0; }

# peak_rss OUT NAME=PID...: every 0.5 s while any PID runs (at most 900 s),
# the largest VmHWM (KiB) seen of each, rewritten to OUT as "NAME KIB" lines
# after each sample. Run in the background; forks nothing in its loop.
peak_rss() {
  local out="$1" i key value alive _procs_now deadline
  shift
  local -a names=() pids=() peaks=()
  for i in "$@"; do
    names+=("${i%%=*}")
    pids+=("${i#*=}")
    peaks+=(0)
  done
  _procs_us
  deadline=$((_procs_now + 900000000))
  while :; do
    alive=0
    for i in "${!pids[@]}"; do
      running "${pids[i]}" || continue
      alive=1
      while read -r key value _; do
        [[ "$key" == VmHWM: ]] && ((value > peaks[i])) && peaks[i]=$value
      done 2>/dev/null < "/proc/${pids[i]}/status"
    done
    for i in "${!pids[@]}"; do echo "${names[i]} ${peaks[i]}"; done > "$out"
    ((alive)) || return 0
    _procs_us
    ((_procs_now < deadline)) || return 0
    _procs_nap 0.5
  done
}

# listening_ports PID: the TCP ports PID listens on, one a line (the
# sockets among its open files that /proc/net/tcp{,6} lists as LISTEN).
listening_ports() {
  local inodes f st local_address inode _
  inodes=" $(find "/proc/$1/fd" -lname 'socket:*' -printf '%l ' 2>/dev/null |
    sed 's/socket:\[\([0-9]*\)\]/\1/g')"
  for f in /proc/net/tcp /proc/net/tcp6; do
    while read -r _ local_address _ st _ _ _ _ _ inode _; do
      [[ "$st" == 0A && "$inodes" == *" $inode "* ]] &&
        echo $((16#${local_address##*:}))
    done < "$f"
  done
}

# stranger_targets DIR: every port the job's processes listen on, as
# ps_stranger's --targets (in targets), each said with its owner; a FAIL if
# the coordinator's port (DIR/port) or a shard's registered address is not
# among them.
stranger_targets() {
  local dir="$1" i p port ports=" " names=(coordinator server-0 server-1 worker-0 worker-1)
  local pids=("$coord" "${servers[@]}" "${workers[@]}")
  targets=""
  for i in "${!pids[@]}"; do
    for p in $(listening_ports "${pids[i]}"); do
      ports+="$p "
      targets+="${targets:+,}127.0.0.1:$p"
      echo "  ${names[i]} listens on 127.0.0.1:$p"
    done
  done
  [[ "$ports" == *" $(cat "$dir/port") "* ]] ||
    fail "the coordinator's port $(cat "$dir/port") is not among the targets"
  for i in 0 1; do
    port=$(sed -n "s/.*server shard $i registered at 127\.0\.0\.1:\([0-9]*\).*/\1/p" \
      "$dir/coordinator.log" | tail -1)
    [[ -n "$port" && "$ports" == *" $port "* ]] ||
      fail "shard $i's registered port '$port' is not among the targets"
  done
}

# soak_run DIR DISTURBED: the job in DIR (its processes with --metrics_port
# 0), under the stranger if DISTURBED is 1, to its end; the peaks in
# DIR/peaks. Sets job_rc (the coordinator's exit status, 124 if it did not
# end) and stranger_rc; returns 1 if the job did not start.
soak_run() {
  local dir="$1" disturbed="$2" sampler p first
  job_rc=124
  stranger_rc=""
  start_coordinator "$dir" "$TMP/job.yaml" --metrics_port=0 || return 1
  start_servers "$dir" 2 --metrics_port=0
  start_workers "$dir" 2 --metrics_port=0
  peak_rss "$dir/peaks" coordinator="$coord" server-0="${servers[0]}" \
    server-1="${servers[1]}" worker-0="${workers[0]}" worker-1="${workers[1]}" &
  sampler=$!
  procs_track "$sampler"
  wait_steps "$dir" 10 60 || return 0
  if ((disturbed)); then
    stranger_targets "$dir"
    first=$(rows "$dir")
    spawn_logged "$dir/stranger.out" "$STRANGER" --targets="$targets" \
      --seconds="$SOAK_SECONDS"
    wait_or_stop "$spawned" $((SOAK_SECONDS + 30)) "ps_stranger"
    stranger_rc=$rc
    if running "$coord"; then
      ok "the job trained through the stranger's $SOAK_SECONDS s (steps $((first - 1))..$(($(rows "$dir") - 1)) of $STEPS)"
    else
      fail "the job ended before the stranger stopped: it did not train under it for $SOAK_SECONDS s"
    fi
  fi
  exited_within "$coord" $((STEPS / 4 + 120)) && job_rc=$rc
  for p in "${servers[@]}" "${workers[@]}"; do exited_within "$p" 10; done
  exited_within "$sampler" 5
}

mib() { echo "$(($1 / 1024)).$(($1 % 1024 * 10 / 1024))"; }  # KIB

# peaks_within CALM DIR: each process's peak in DIR/peaks is at most
# RSS_FACTOR times its peak in CALM/peaks; prints both and the bound (MiB).
# One ok, or a FAIL per process over it or not sampled.
peaks_within() {
  local name calm_kib kib over=0
  echo "--- peak RSS (VmHWM, MiB): undisturbed, under the stranger, bound"
  while read -r name calm_kib; do
    kib=$(sed -n "s/^$name //p" "$2/peaks")
    kib=${kib:-0}
    printf '  %-12s %6s %6s %6s\n' "$name" "$(mib "$calm_kib")" "$(mib "$kib")" \
      "$(mib $((RSS_FACTOR * calm_kib)))"
    if ((calm_kib == 0 || kib == 0)); then
      fail "$name: no peak RSS sampled"
      over=1
    elif ((kib > RSS_FACTOR * calm_kib)); then
      fail "$name: peak RSS $(mib "$kib") MiB under the stranger, over ${RSS_FACTOR}x its undisturbed $(mib "$calm_kib") MiB"
      over=1
    fi
  done < "$1/peaks"
  ((over)) || ok "every process's peak RSS under the stranger within ${RSS_FACTOR}x its undisturbed peak"
}

show_logs() {  # DIR
  echo "--- $1: coordinator"; tail -15 "$1/coordinator.log"
  for f in "$1"/server-*.log "$1"/worker-*.log; do echo "--- $f"; tail -5 "$f"; done
}

# 1. Undisturbed.
calm="$TMP/calm"
start_s=$SECONDS
soak_run "$calm" 0 || exit 1
calm_s=$((SECONDS - start_s))
if ((job_rc != 0)) || [[ ! -f "$calm/$final/MANIFEST.json" ]]; then
  show_logs "$calm"
  echo "FAIL: the undisturbed job failed (coordinator exit $job_rc) or left no final checkpoint"
  exit 1
fi
echo "undisturbed: $STEPS steps in $calm_s s"

# 2. Under the stranger.
dir="$TMP/soak"
start_s=$SECONDS
soak_run "$dir" 1 || exit 1
soak_s=$((SECONDS - start_s))
echo "under the stranger: $STEPS steps in $soak_s s"
((job_rc == 0)) && ok "the disturbed job completed (exit 0)" ||
  fail "the disturbed job: coordinator exit $job_rc: $(tail -3 "$dir/coordinator.log")"
summary_ok "$dir" "$STEPS"
if [[ -f "$dir/$final/MANIFEST.json" ]]; then
  before=$failures
  same_files "$calm/$final" "$dir/$final" "under the stranger" \
    shard-00000-of-00002.ckpt shard-00001-of-00002.ckpt
  ((failures == before)) &&
    ok "final shard files byte-identical to the undisturbed run's"
else
  fail "no final checkpoint under the stranger"
fi

echo "--- the stranger's tally"
grep -v '^method ' "$dir/stranger.out"
if [[ "$stranger_rc" == 0 ]]; then
  ok "the stranger exited 0: no call but health returned OK"
else
  fail "the stranger exited '$stranger_rc': $(grep -E 'BREACH|did not end' "$dir/stranger.out")"
fi
grpc_ports=("$(cat "$dir/port")" $(sed -n 's/.*server shard [01] registered at 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$dir/coordinator.log"))
for port in "${grpc_ports[@]}"; do
  n=$(sed -n "s/^target 127\.0\.0\.1:$port UNAUTHENTICATED \([0-9]*\)$/\1/p" "$dir/stranger.out")
  ((${n:-0} > 0)) && ok "127.0.0.1:$port refused $n of the stranger's calls UNAUTHENTICATED" ||
    fail "127.0.0.1:$port refused none of the stranger's calls UNAUTHENTICATED"
done

peaks_within "$calm" "$dir"

((failures)) && show_logs "$dir"
procs_finish "PASS: $SOAK_SECONDS s of a stranger: job bit-identical, every call refused, peak RSS within ${RSS_FACTOR}x"
