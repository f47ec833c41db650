#!/usr/bin/python3
"""Tests of timeline.py's merge, segments and medians (no job runs)."""

import contextlib
import io
import os
import statistics
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timeline  # noqa: E402


def write(path, lines):
    with open(path, "w") as f:
        for t, tid, tag, arg in lines:
            f.write(f"{t:.9f} {tid} {tag} {arg}\n")


class TimelineTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.prefix = os.path.join(self.dir.name, "tl")
        # Three pushes from a worker (pid 10) and a server (pid 20), 1 s
        # apart; the server reads two messages of each push.
        worker, server = [], []
        for i, extra in enumerate((0, 10e-6, 20e-6)):
            t = 100.0 + i
            worker += [(t, 1, "push.start", i),
                       (t + 100e-6 + extra, 2, "push.answered", -1)]
            server += [(t + 30e-6, 3, "srv.push.read", 1048576),
                       (t + 60e-6 + extra, 3, "srv.push.read", 1048576)]
        write(self.prefix + ".10", worker)
        write(self.prefix + ".20", server)

    def tearDown(self):
        self.dir.cleanup()

    def printed(self, *args):
        """What timeline.main prints for PREFIX and `args` (status 0)."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(timeline.main([self.prefix, *args]), 0)
        return out.getvalue()

    def test_marks_merge_by_time_and_number_within_a_segment(self):
        marks, truncated = timeline.read_marks([self.prefix + ".10",
                                                self.prefix + ".20"])
        self.assertEqual(truncated, 0)
        segs = timeline.segments(marks, "push.start")
        self.assertEqual(len(segs), 3)
        self.assertEqual([m[3] for m in segs[0]],
                         ["push.start", "srv.push.read", "srv.push.read",
                          "push.answered"])
        table = timeline.offsets(segs)
        self.assertEqual(list(table),
                         ["push.start", "srv.push.read", "srv.push.read#2",
                          "push.answered"])
        self.assertAlmostEqual(statistics.median(table["srv.push.read#2"]),
                               70.0, places=3)
        self.assertAlmostEqual(statistics.median(table["push.answered"]),
                               110.0, places=3)

    def test_main_prints_every_mark_and_skips_cold_segments(self):
        text = self.printed("--skip", "1")
        self.assertIn("2 segments from 'push.start' (2 files)", text)
        answered = [l for l in text.splitlines()
                    if l.startswith("push.answered")]
        self.assertEqual(len(answered), 1)
        self.assertIn(" 115.0 ", answered[0])  # median of 110 and 120 us

    def test_only_files_named_prefix_dot_pid_are_read(self):
        with open(self.prefix + ".yaml", "w") as f:
            f.write("job:\n  name: x\n")
        self.assertIn("3 segments from 'push.start' (2 files)",
                      self.printed("--skip", "0"))

    def test_marks_in_few_segments_are_left_out_and_counted(self):
        with open(self.prefix + ".20", "a") as f:
            f.write("102.000090000 3 srv.push.commit -1\n")
        text = self.printed("--skip", "0")
        self.assertIn("1 marks in fewer than 0.5 of the segments left out",
                      text)
        self.assertNotIn("srv.push.commit", text)
        self.assertIn("srv.push.commit",
                      self.printed("--skip", "0", "--min_share", "0"))

    def test_a_cut_off_last_line_is_left_out_and_counted(self):
        with open(self.prefix + ".20", "a") as f:
            f.write("103.000000001 3 srv.pu")
        self.assertIn("3 segments from 'push.start' (2 files, 1 ending in a "
                      "cut-off line, left out)", self.printed("--skip", "0"))

    def test_bad_input_is_refused_with_status_2(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(timeline.main([self.prefix + "x"]), 2)
            self.assertEqual(timeline.main([self.prefix, "--skip", "3"]), 2)
            with open(self.prefix + ".30", "w") as f:
                f.write("1.0 2 only-three\n")
            self.assertEqual(timeline.main([self.prefix]), 2)
        self.assertIn("no files", err.getvalue())
        self.assertIn("no 'push.start' marks after the first 3", err.getvalue())
        self.assertIn(".30:1: expected 4 fields", err.getvalue())


if __name__ == "__main__":
    unittest.main()
