#!/usr/bin/python3
"""Where a push's time goes: merges the marks of PSTRAIN_TIMELINE runs.

Run a job with PSTRAIN_TIMELINE=PREFIX in its environment (every ps_worker
and ps_server then writes its marks to PREFIX.<pid>, common/timeline.h),
then

  tools/bench/timeline.py [--anchor push.start] [--skip 100] PREFIX

merges every PREFIX.<pid> file by time (one machine, one clock), cuts the
merged marks at each anchor mark into one segment per operation (a push),
numbers each mark by its occurrence within its segment (srv.push.read#2 is
the second message the server read), and prints, in order, each mark's median
offset from the anchor in microseconds over the segments after the first
SKIP (warm steps), with the number of segments that had it and the median
gap from the mark before; marks found in fewer than MIN_SHARE of the
segments (a rare second operation inside one, at an evaluation or the end)
are left out and counted. Meant for one worker and one server: with several,
their segments interleave. Exit status 2 on bad arguments or no marks.
"""

import argparse
import glob
import signal
import statistics
import sys


def read_marks(paths):
    """(time_s, pid, tid, tag, arg) of every line of every file, by time,
    and the number of files whose last line was cut short (a process ended
    before its buffer was flushed; that line is left out)."""
    marks = []
    truncated = 0
    for path in paths:
        pid = path.rsplit(".", 1)[-1]
        with open(path) as f:
            lines = f.read().split("\n")
        if lines[-1]:  # no newline at the end: a cut-off last line
            truncated += 1
        for n, line in enumerate(lines[:-1], 1):
            parts = line.split()
            if len(parts) != 4:
                raise ValueError(f"{path}:{n}: expected 4 fields: {line!r}")
            marks.append((float(parts[0]), pid, int(parts[1]), parts[2],
                          int(parts[3])))
    marks.sort(key=lambda m: m[0])
    return marks, truncated


def segments(marks, anchor):
    """The marks from each anchor mark to the next one (none before the
    first anchor)."""
    out = []
    for m in marks:
        if m[3] == anchor:
            out.append([m])
        elif out:
            out[-1].append(m)
    return out


def offsets(segs):
    """{numbered tag: [offset_us per segment]}, keys in order of median."""
    table = {}
    for seg in segs:
        t0 = seg[0][0]
        seen = {}
        for m in seg:
            seen[m[3]] = seen.get(m[3], 0) + 1
            key = m[3] if seen[m[3]] == 1 else f"{m[3]}#{seen[m[3]]}"
            table.setdefault(key, []).append((m[0] - t0) * 1e6)
    return dict(sorted(table.items(),
                       key=lambda kv: statistics.median(kv[1])))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("prefix", help="PSTRAIN_TIMELINE's value in the run")
    p.add_argument("--anchor", default="push.start",
                   help="the mark each segment starts at (push.start)")
    p.add_argument("--skip", type=int, default=100,
                   help="segments left out at the start (cold steps)")
    p.add_argument("--min_share", type=float, default=0.5,
                   help="leave out marks in fewer than this share of the "
                        "segments (0..1; 0.5)")
    args = p.parse_args(argv)
    if args.skip < 0:
        p.error("--skip must be >= 0")
    if not 0 <= args.min_share <= 1:
        p.error("--min_share must be in [0, 1]")
    # PREFIX.<pid> only (not, say, a job file named PREFIX.yaml).
    paths = sorted(p for p in glob.glob(glob.escape(args.prefix) + ".*")
                   if p.rsplit(".", 1)[-1].isdigit())
    if not paths:
        print(f"timeline: no files {args.prefix}.*", file=sys.stderr)
        return 2
    try:
        marks, truncated = read_marks(paths)
    except ValueError as e:
        print(f"timeline: {e}", file=sys.stderr)
        return 2
    segs = segments(marks, args.anchor)[args.skip:]
    if not segs:
        print(f"timeline: no '{args.anchor}' marks after the first "
              f"{args.skip} in {len(paths)} files", file=sys.stderr)
        return 2
    table = offsets(segs)
    rare = [k for k, v in table.items() if len(v) < args.min_share * len(segs)]
    for k in rare:
        del table[k]
    print(f"{len(segs)} segments from '{args.anchor}' ({len(paths)} files"
          + (f", {truncated} ending in a cut-off line, left out"
             if truncated else "")
          + "); median microseconds from the anchor, and from the mark before"
          + (f"; {len(rare)} marks in fewer than {args.min_share:g} of the "
             "segments left out" if rare else ""))
    before = 0.0
    for key, values in table.items():
        at = statistics.median(values)
        print(f"{key:28s} {at:9.1f} {at - before:+9.1f}   "
              f"({len(values)} segments)")
        before = at
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly
    sys.exit(main(sys.argv[1:]))
