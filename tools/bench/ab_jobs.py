#!/usr/bin/python3
"""Real jobs of two or more builds side by side, in interleaved rounds.

For A/B measurements of a change to ps_worker, ps_server or the coordinator
(docs/performance-log.md): every round runs `./psctl run --config C --bin DIR`
once per build directory DIR and job config C, the builds in a rotated order
(even rounds A B C.., odd rounds reversed, shifted every two rounds), and
prints for each config:

- the median over rounds of each build's pull_s, push_s and compute_s (each
  a median over steps FIRST..LAST of the job's metrics.csv) and of its step
  time (wall_s between consecutive reports); of "before", the communication
  (pull_s + push_s) of the steps before FIRST added up (a job's start, where
  its first touches of memory and connections fall); and of "job", the
  job's wall_s from summary.json (all of its steps);
- for every build after the first, the median over rounds of the first
  build's figure over its figure within the round (above 1: faster than the
  first), with the rounds it was faster in;
- the load average at the start of every round, and whether every job's
  final loss and accuracy (summary.json) matched the first build's.

A build directory holds the binaries as bazel-bin does: coordinator/
ps_coordinator, server/ps_server, worker/ps_worker, tools/report/ps_report,
tools/launch/ps_launch. Exit status 0 when every job ran, 1 when one failed
(its log is named), 2 on bad arguments.

  tools/bench/ab_jobs.py --rounds 16 --config a.yaml --config b.yaml \\
      /tmp/before /tmp/after
"""

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
FIGURES = ("pull_s", "push_s", "compute_s", "step", "before", "job")


def order(round_index, builds):
    """The order of the builds in a round: rotated so each leads in turn."""
    n = len(builds)
    shift = round_index // 2
    if round_index % 2 == 0:
        return [(k + shift) % n for k in range(n)]
    return [(n - 1 - k + shift) % n for k in range(n)]


def job_figures(run_dir, first, last):
    """Medians over steps first..last of a finished job's metrics.csv."""
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r.get("step", "").isdigit()]
    wall = {int(r["step"]): float(r["wall_s"]) for r in rows}
    kept = [r for r in rows if first <= int(r["step"]) <= last]
    if not kept or any(s - 1 not in wall for s in range(first, last + 1)):
        raise ValueError(f"{run_dir}/metrics.csv has no steps {first}..{last}")
    out = {f: statistics.median(float(r[f]) for r in kept)
           for f in ("pull_s", "push_s", "compute_s")}
    out["step"] = statistics.median(
        wall[s] - wall[s - 1] for s in range(first, last + 1))
    out["before"] = sum(float(r["pull_s"]) + float(r["push_s"])
                        for r in rows if int(r["step"]) < first)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    out["job"] = float(summary.get("wall_s", 0))
    out["result"] = (summary.get("final_loss"), summary.get("final_accuracy"))
    return out


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("builds", nargs="+", help="build directories (A first)")
    p.add_argument("--config", action="append", required=True,
                   help="job config (repeat for several)")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--first_step", type=int, default=3)
    p.add_argument("--last_step", type=int, default=24)
    p.add_argument("--out", default="/tmp/ab_jobs",
                   help="where the jobs' run directories go")
    a = p.parse_args()
    if len(a.builds) < 2 or a.rounds < 1 or a.first_step < 1 or \
            a.last_step < a.first_step:
        p.error("need 2+ builds, --rounds >= 1, 1 <= --first_step <= "
                "--last_step")
    for d in a.builds:
        if not os.path.isfile(os.path.join(d, "worker", "ps_worker")):
            p.error(f"{d}: no worker/ps_worker (a bazel-bin layout)")
    for c in a.config:
        if not os.path.isfile(c):
            p.error(f"--config {c}: no such file")
    os.makedirs(a.out, exist_ok=True)
    names = [chr(ord("A") + k) for k in range(len(a.builds))]
    # res[config][round][build] = figures
    res = {c: [{} for _ in range(a.rounds)] for c in a.config}
    for r in range(a.rounds):
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        print(f"round {r + 1}/{a.rounds}, load average {load}", flush=True)
        for c in a.config:
            for b in order(r, a.builds):
                config_name = os.path.splitext(os.path.basename(c))[0]
                run_dir = os.path.join(a.out,
                                       f"r{r}_{names[b]}_{config_name}")
                shutil.rmtree(run_dir, ignore_errors=True)
                log = run_dir + ".log"
                with open(log, "w") as f:
                    rc = subprocess.call(
                        [os.path.join(ROOT, "psctl"), "run", "--config", c,
                         "--bin", os.path.abspath(a.builds[b]), "--out",
                         run_dir], stdout=f, stderr=subprocess.STDOUT,
                        cwd=ROOT)
                if rc != 0:
                    print(f"ab_jobs: build {names[b]} on {c} failed "
                          f"(exit {rc}): see {log}", file=sys.stderr)
                    return 1
                res[c][r][b] = job_figures(run_dir, a.first_step,
                                           a.last_step)
    for c in a.config:
        print(f"\n{c} ({a.rounds} rounds; ms; x: A / build within a round, "
              f"rounds faster than A)")
        for fig in FIGURES:
            line = f"  {fig:9s}"
            for b, name in enumerate(names):
                med = statistics.median(
                    res[c][r][b][fig] for r in range(a.rounds)) * 1e3
                line += f" | {name} {med:8.2f}"
                if b > 0:
                    ratios = [res[c][r][0][fig] / res[c][r][b][fig]
                              for r in range(a.rounds)
                              if res[c][r][b][fig] > 0]
                    if ratios:
                        faster = sum(1 for x in ratios if x > 1)
                        line += (f" x{statistics.median(ratios):.3f}"
                                 f" ({faster}/{len(ratios)})")
            print(line)
        same = all(res[c][r][b]["result"] == res[c][0][0]["result"]
                   for r in range(a.rounds) for b in range(len(names)))
        print(f"  final loss and accuracy the same in every job: "
              f"{'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
