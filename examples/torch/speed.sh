#!/bin/bash
# The Python worker's communication per step against the C++ worker's
# (docs/python.md, "Speed"): the job of configs/python_speed.yaml run by
# ps_worker and by examples/torch/train_mlp.py, interleaved (C++, Python,
# C++, ...) ROUNDS times; per run the mean pull, push and pull + push ms of
# steps 5..59 from metrics.csv, then the median of each worker's runs and
# the ratio; each line also has the load average at the run's start.
# Writes OUT/results.txt (a line per run) and OUT/medians.txt.
#   examples/torch/speed.sh [ROUNDS] [OUT]      (defaults: 3, runs/speed)
# With $PYCMD_B (and $PYCMD_C) set, each round also runs that second (third)
# Python worker command, labels pyb and pyc (C++, py, pyb, pyc, ...): an A/B
# of clients in the same run, e.g. with a copy of the package from before:
#   PYCMD_B="env PYTHONPATH=/tmp/py-before /usr/bin/python3 examples/torch/train_mlp.py"
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ROUNDS="${1:-3}"
OUT="${2:-$ROOT/runs/speed}"
cd "$ROOT"
mkdir -p "$OUT"
./psctl build
BIN="$(bazel info --color=no --curses=no --config=opt bazel-bin 2>/dev/null)"
CONFIG="$ROOT/configs/python_speed.yaml"
# $PYCMD replaces the Python worker command, e.g. to measure another copy of
# the package: PYCMD="env PYTHONPATH=DIR /usr/bin/python3 examples/torch/train_mlp.py".
PYCMD="${PYCMD:-/usr/bin/python3 examples/torch/train_mlp.py}"
declare -A CMD=([py]="$PYCMD" [pyb]="${PYCMD_B:-}" [pyc]="${PYCMD_C:-}")
WHO=(cpp py)
[[ -n "${CMD[pyb]}" ]] && WHO+=(pyb)
[[ -n "${CMD[pyc]}" ]] && WHO+=(pyc)

# step-mean DIR: "pull_ms push_ms comm_ms bytes_pushed bytes_pulled"
step_mean() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["step"] >= 5 && $col["step"] <= 59 && $col["push_s"] != "" {
      pull += $col["pull_s"]; push += $col["push_s"]; n++ }
    END { if (n == 0) exit 1
      printf "%.1f %.1f %.1f", 1000 * pull / n, 1000 * push / n,
        1000 * (pull + push) / n }' "$1/metrics.csv"
  printf ' %s %s\n' "$("$BIN/tools/report/ps_report" summary-get "$1" bytes_pushed)" \
    "$("$BIN/tools/report/ps_report" summary-get "$1" bytes_pulled)"
}

: >"$OUT/results.txt"
for ((r = 1; r <= ROUNDS; r++)); do
  for who in "${WHO[@]}"; do
    dir="$OUT/$who-r$r"
    rm -rf "$dir"
    load="$(cut -d' ' -f1-3 /proc/loadavg)"
    if [[ "$who" == py* ]]; then
      ./psctl run --bin "$BIN" --config "$CONFIG" --out "$dir" --worker-cmd "${CMD[$who]}" >"$dir.log" 2>&1 \
        || { echo "$who round $r failed: $dir.log" >&2; tail -5 "$dir.log" >&2; exit 1; }
    else
      ./psctl run --bin "$BIN" --config "$CONFIG" --out "$dir" >"$dir.log" 2>&1 \
        || { echo "$who round $r failed: $dir.log" >&2; tail -5 "$dir.log" >&2; exit 1; }
    fi
    line="$who $r $(step_mean "$dir") load $load"
    echo "$line" | tee -a "$OUT/results.txt"
  done
done
# Medians by worker and the ratio of the communication medians.
awk '
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
      t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { n[$1]++; pull[$1, n[$1]] = $3; push[$1, n[$1]] = $4; comm[$1, n[$1]] = $5 }
  END {
    for (w in n) {
      delete a; for (i = 1; i <= n[w]; i++) a[i] = pull[w, i]; mp[w] = median(a, n[w])
      delete a; for (i = 1; i <= n[w]; i++) a[i] = push[w, i]; ms[w] = median(a, n[w])
      delete a; for (i = 1; i <= n[w]; i++) a[i] = comm[w, i]; mc[w] = median(a, n[w])
      printf "median %s: pull %.1f push %.1f comm %.1f ms/step (%d runs)\n", w, mp[w], ms[w], mc[w], n[w]
    }
    if (mc["cpp"] > 0) printf "ratio python/c++ communication: %.2f\n", mc["py"] / mc["cpp"]
    if (mc["cpp"] > 0 && ("pyb" in n)) printf "ratio pyb/c++ communication: %.2f\n", mc["pyb"] / mc["cpp"]
    if (mc["cpp"] > 0 && ("pyc" in n)) printf "ratio pyc/c++ communication: %.2f\n", mc["pyc"] / mc["cpp"]
  }' "$OUT/results.txt" | tee "$OUT/medians.txt"
