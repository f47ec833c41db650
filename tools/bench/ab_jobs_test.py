#!/usr/bin/python3
"""Tests of ab_jobs.py's round order and per-job figures (no jobs run)."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_jobs  # noqa: E402


class OrderTest(unittest.TestCase):

    def test_every_round_runs_every_build_once_and_each_leads(self):
        for n in (2, 3, 4):
            builds = list(range(n))
            leaders = set()
            for r in range(2 * n):
                o = ab_jobs.order(r, builds)
                self.assertEqual(sorted(o), builds, (n, r))
                leaders.add(o[0])
            self.assertEqual(leaders, set(builds), n)

    def test_two_builds_alternate_which_goes_first(self):
        self.assertEqual([ab_jobs.order(r, "AB")[0] for r in range(4)],
                         [0, 1, 1, 0])


def write_job(d, walls, pulls, loss=1.5, accuracy=0.25):
    with open(os.path.join(d, "metrics.csv"), "w") as f:
        f.write("step,wall_s,compute_s,pull_s,push_s\n")
        for step, (wall, pull) in enumerate(zip(walls, pulls)):
            f.write(f"{step},{wall},0.001,{pull},0.002\n")
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"final_loss": loss, "final_accuracy": accuracy,
                   "wall_s": walls[-1]}, f)


class JobFiguresTest(unittest.TestCase):

    def test_medians_over_the_steps_asked_for(self):
        with tempfile.TemporaryDirectory() as d:
            # Steps 0..5; step times 1, 2, 4, 8, 16 s after step 0.
            write_job(d, [0, 1, 3, 7, 15, 31], [9, 9, 1, 2, 3, 9])
            got = ab_jobs.job_figures(d, 2, 4)
            self.assertEqual(got["pull_s"], 2)     # steps 2..4: 1, 2, 3
            self.assertEqual(got["step"], 4)       # 2, 4, 8
            self.assertEqual(got["push_s"], 0.002)
            # Steps 0 and 1 before step 2: pulls 9 + 9, pushes 2 x 0.002.
            self.assertAlmostEqual(got["before"], 18.004)
            self.assertEqual(got["job"], 31)
            self.assertEqual(got["result"], (1.5, 0.25))

    def test_a_job_without_those_steps_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            write_job(d, [0, 1, 2], [1, 1, 1])
            with self.assertRaises(ValueError):
                ab_jobs.job_figures(d, 2, 4)


if __name__ == "__main__":
    unittest.main()
