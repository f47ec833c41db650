#!/usr/bin/env bash
# End-to-end: `psctl run` starts the coordinator, servers and workers as
# separate OS processes talking gRPC on loopback, in both consistency modes;
# bad flags fail with a message naming the flag; Ctrl-C leaves no process.
set -uo pipefail
source "$TEST_SRCDIR/pstrain/tests/lib/procs.sh" # REPORT, TMP, psctl_run, ...

# The run record is read through ps_report (common/run_record), not grep.
json() { "$REPORT" summary-get "$1" "$2"; }
# wait_steps_of_psctl OUT: waits (30 s, while psctl_pid runs) until the job
# has a step in OUT/metrics.csv.
wait_steps_of_psctl() {
  wait_for --while "$psctl_pid" 30 "a step in $1/metrics.csv" metrics_rows_over "$1" 1
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }

# 1. Sync job: summary keys, real learning, zero staleness, clean exit.
out="$TMP/sync"
if psctl_run 240 "$out" "$TMP/sync.log" --config "$ROOT/configs/default.yaml" --mode sync \
    --workers 2 --servers 2 --steps 120; then
  for key in mode staleness workers servers steps wall_s samples_per_s final_loss \
             final_accuracy bytes_pushed bytes_pulled staleness_max staleness_mean \
             bytes_sent bytes_received diverged failed failure; do
    json "$out/summary.json" "$key" >/dev/null || fail "summary.json lacks $key"
  done
  [[ "$(json "$out/summary.json" mode)" == sync ]] || fail "mode is not sync"
  [[ "$(json "$out/summary.json" steps)" == 120 ]] || fail "steps != 120"
  [[ "$(json "$out/summary.json" staleness_max)" == 0 ]] || fail "sync staleness_max != 0"
  [[ "$(json "$out/summary.json" failure)" == null ]] || fail "a failure recorded for a clean run"
  acc="$(json "$out/summary.json" final_accuracy)"
  ge "$acc" 0.6 || fail "sync accuracy $acc < 0.6"
  ge "$(json "$out/summary.json" bytes_pushed)" 1 || fail "no bytes pushed"
  mapfile -t losses < <("$REPORT" metrics-get "$out" loss)
  rows=${#losses[@]}
  [[ $rows -eq 121 ]] || fail "metrics.csv has $rows rows, want 120 steps + final eval"
  first=${losses[0]:-}
  last=${losses[119]:-}
  ge "$first" "$last" || fail "loss did not fall ($first -> $last)"
  ok "sync run: accuracy $acc, loss $first -> $last"
else
  cat "$TMP/sync.log"; fail "sync run failed"
fi

# 2. Async SSP job: staleness bounded by s.
out="$TMP/async"
if psctl_run 240 "$out" "$TMP/async.log" --config "$ROOT/configs/default.yaml" --mode async \
    --staleness 2 --workers 3 --servers 2 --steps 80; then
  smax="$(json "$out/summary.json" staleness_max)"
  [[ "$(json "$out/summary.json" mode)" == async ]] || fail "mode is not async"
  [[ "$(json "$out/summary.json" staleness)" == 2 ]] || fail "staleness is not 2"
  ((smax <= 2)) || fail "async staleness_max $smax > 2"
  ok "async run: staleness_max $smax, accuracy $(json "$out/summary.json" final_accuracy)"
else
  cat "$TMP/async.log"; fail "async run failed"
fi

# 3. Bad input names the flag or file and changes nothing.
# user-facing message checks: each error names what is wrong.
psctl_run 60 "$TMP/bad" "$TMP/bad.log" --mode bogus
if [[ $rc -eq 2 ]] && grep -q -- "--mode" "$TMP/bad.log"; then ok "bad --mode rejected"; else
  cat "$TMP/bad.log"; fail "bad --mode: rc $rc"; fi
run_logged 60 "$TMP/bad2.log" "$PSCTL" run --bin "$ROOT" --config "$TMP/missing.yaml"
if [[ $rc -eq 2 ]] && grep -q "missing.yaml" "$TMP/bad2.log"; then ok "missing config named"; else
  cat "$TMP/bad2.log"; fail "missing --config: rc $rc"; fi
printf 'job:\n  wokers: 3\n' > "$TMP/typo.yaml"
run_logged 60 "$TMP/bad3.log" "$PSCTL" run --bin "$ROOT" --config "$TMP/typo.yaml"
if [[ $rc -eq 2 ]] && grep -q "wokers" "$TMP/bad3.log" && grep -q "typo.yaml:2" "$TMP/bad3.log"; then
  ok "unknown config key named with its line"; else cat "$TMP/bad3.log"; fail "typo config: rc $rc"; fi

# 4. Interrupted (SIGTERM here: a background job of a non-interactive shell
#    ignores SIGINT, so Ctrl-C is exercised by the same trap with TERM).
out="$TMP/interrupt"
psctl_start "$out" "$TMP/int.log" --config "$ROOT/configs/default.yaml" --steps 1000000
wait_steps_of_psctl "$out"
kill -TERM "$psctl_pid"
exited_within "$psctl_pid" 30 || { rc=-1; fail "psctl run still runs 30 s after SIGTERM"; }
sleep 0.5
left=$(pgrep -f -- "--coordinator=127.0.0.1:$(cat "$out/logs/coordinator.port" 2>/dev/null)" | wc -l)
if [[ $rc -eq 143 && $left -eq 0 ]] && ! pgrep -f "ps_coordinator.*$out" >/dev/null; then
  ok "interrupt stopped every process"
else
  cat "$TMP/int.log"; fail "after interrupt: rc $rc, $left processes left"
fi

# 5. /metrics during a job: the documented series exist and move.
http_get() {  # port path
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$2" >&3
  timeout 10 cat <&3
  exec 3>&-
}
metric() { grep "^$2 " <<<"$1" | head -1 | awk '{print $2}'; }
port_of() { sed -n 's|.*metrics at http://[0-9.]*:\([0-9]*\)/metrics.*|\1|p' "$1" | head -1; }
out="$TMP/metrics"
psctl_start "$out" "$TMP/metrics.log" --config "$ROOT/configs/default.yaml" --steps 4000
wait_steps_of_psctl "$out"
sport=$(port_of "$out/logs/server-0.log")
wport=$(port_of "$out/logs/worker-0.log")
cport=$(port_of "$out/logs/coordinator.log")
s1=$(http_get "$sport" /metrics); w1=$(http_get "$wport" /metrics); c1=$(http_get "$cport" /metrics)
sleep 0.5
s2=$(http_get "$sport" /metrics); w2=$(http_get "$wport" /metrics)
missing=""
for name in pstrain_server_push_seconds_bucket pstrain_server_pull_seconds_count \
    pstrain_server_received_bytes_total pstrain_server_sent_bytes_total \
    pstrain_server_staleness_bucket pstrain_server_barrier_wait_seconds_count \
    pstrain_server_optimizer_apply_seconds_count pstrain_server_live_workers; do
  grep -q "^$name" <<<"$s1" || missing="$missing $name"
done
for name in pstrain_worker_pull_seconds_count pstrain_worker_push_seconds_count \
    pstrain_worker_steps_total pstrain_worker_samples_per_second pstrain_worker_loss \
    pstrain_worker_pushed_bytes_total pstrain_worker_pulled_bytes_total; do
  grep -q "^$name" <<<"$w1" || missing="$missing $name"
done
for name in pstrain_coordinator_steps pstrain_coordinator_live_workers pstrain_coordinator_loss; do
  grep -q "^$name" <<<"$c1" || missing="$missing $name"
done
p1=$(metric "$s1" pstrain_server_pushes_total); p2=$(metric "$s2" pstrain_server_pushes_total)
t1=$(metric "$w1" pstrain_worker_steps_total); t2=$(metric "$w2" pstrain_worker_steps_total)
# 5b. The running worker's environment asks glibc's malloc for huge pages
#     (common/huge_pages.h: ps_launch sets GLIBC_TUNABLES for ps_worker).
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
wpid=""
for p in $(descendants "$psctl_pid"); do
  cmd="$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" || continue
  [[ "$cmd" == *"/worker/ps_worker "*"--rank=0 "* ]] && wpid=$p
done
tunables="$([[ -n "$wpid" ]] && tr '\0' '\n' <"/proc/$wpid/environ" | sed -n 's/^GLIBC_TUNABLES=//p')"
# user-facing message check: the worker's log says which pages its heap is on.
if [[ ":$tunables:" == *":glibc.malloc.hugetlb=1:"* ]] &&
    grep -q "heap: .*glibc.malloc.hugetlb=1 from GLIBC_TUNABLES" "$out/logs/worker-0.log"; then
  ok "worker 0 (pid $wpid) runs with GLIBC_TUNABLES=$tunables and logs it"
else
  fail "worker 0 (pid ${wpid:-not found}): GLIBC_TUNABLES='$tunables', log: $(grep 'heap:' "$out/logs/worker-0.log")"
fi
kill -TERM "$psctl_pid" 2>/dev/null
exited_within "$psctl_pid" 30 || fail "psctl run still runs 30 s after SIGTERM"
if [[ -z "$missing" && -n "$p1" && -n "$t1" ]] && ge "$p2" "$((${p1%.*} + 1))" && ge "$t2" "$((${t1%.*} + 1))"; then
  ok "metrics move: server pushes $p1 -> $p2, worker steps $t1 -> $t2"
else
  fail "metrics: missing [$missing], pushes $p1 -> $p2, steps $t1 -> $t2"
fi

# 6. Acceptance on real data (digits from Debian's python3-sklearn, extracted
#    by ./psctl setup into the checkout): sync and async:2 reach >= 0.95.
src="$(dirname "$(readlink -f "$ROOT/psctl")")"
if [[ -s "$src/.cache/pstrain/datasets/digits.csv" ]]; then
  for mode in "sync" "async --staleness 2"; do
    out="$TMP/digits-${mode// /}"
    sed "s|dir: .cache/pstrain/datasets|dir: $src/.cache/pstrain/datasets|" \
      "$ROOT/configs/digits.yaml" > "$TMP/digits.yaml"
    # shellcheck disable=SC2086
    if psctl_run 240 "$out" "$TMP/digits.log" --config "$TMP/digits.yaml" --mode $mode \
        --workers 4 --servers 2; then
      acc="$(json "$out/summary.json" final_accuracy)"
      if ge "$acc" 0.95; then ok "digits $mode: accuracy $acc"; else fail "digits $mode: accuracy $acc < 0.95"; fi
    else
      cat "$TMP/digits.log"; fail "digits $mode run failed"
    fi
  done
else
  echo "SKIP digits acceptance: $src/.cache/pstrain/datasets/digits.csv is missing (./psctl setup extracts it)"
fi

# 7. Divergence (issue 11 #3): a learning rate that overflows the weights
#    gives NaN losses; summary.json stays valid JSON (null losses, diverged)
#    and the job fails, psctl naming the first failure's cause.
out="$TMP/diverge"
sed 's/^  base_lr: .*/  base_lr: 1.0e+30/' "$ROOT/configs/default.yaml" > "$TMP/diverge.yaml"
psctl_run 120 "$out" "$TMP/diverge.log" --config "$TMP/diverge.yaml" --mode allreduce \
  --workers 2 --steps 30
if [[ $rc -eq 1 && "$(json "$out/summary.json" diverged)" == true &&
      "$(json "$out/summary.json" failed)" == true &&
      "$(json "$out/summary.json" failure.process)" == worker ]] &&
    # user-facing message check: psctl prints the recorded cause.
    grep -q "first failure: worker [0-9]: training diverged" "$TMP/diverge.log"; then
  ok "divergence fails the job: $("$REPORT" failure "$out")"
else
  cat "$TMP/diverge.log"; fail "divergence: rc $rc"
fi

procs_finish "$passed passed, $failures failed" "($passed passed)"
