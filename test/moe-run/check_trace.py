#!/usr/bin/env python3
"""Summarises moe-run --trace files, one line per rank: how many spans of
each expert kernel are on the compute track and of each expert exchange on
the communication track (or, with --prefix, of spans whose names start with
each prefix; with --track, only that track's), after checking the file is a
well-formed Chrome trace: named tracks, "X" events with non-negative times,
no two spans of one track overlapping. With --at-least N, fails when a
prefix counts fewer than N spans."""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("traces", nargs="+")
parser.add_argument("--prefix", action="append", default=[])
parser.add_argument("--track", help="with --prefix: count this track's spans only")
parser.add_argument("--at-least", type=int, default=0,
                    help="with --prefix: the fewest spans each must count")
args = parser.parse_args()
if (args.track or args.at_least) and not args.prefix:
    parser.error("--track and --at-least count the spans of --prefix")

# The experts' kernels, counted together with their forms that keep the up
# projections (ExpertsWithHidden, ExpertsGradWithHidden).
EXPERTS = ["Experts", "ExpertsGrad"]
EXCHANGES = ["expert dispatch", "expert combine", "expert dispatch (backward)",
             "expert combine (backward)"]

for path in args.traces:
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    # The communication thread of --async-collectives has a track when used.
    if sorted(threads.values()) not in (
            ["communication", "compute"],
            ["communication", "communication (async)", "compute"]):
        sys.exit(f"{path}: tracks {threads}")
    spans = [e for e in events if e["ph"] == "X"]
    rank = {e["pid"] for e in events}
    if len(rank) != 1:
        sys.exit(f"{path}: events of ranks {rank}")
    for tid in threads:
        track = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans
                       if e["tid"] == tid)
        for (s0, e0), (s1, e1) in zip(track, track[1:]):
            if s0 < 0 or e0 < s0 or s1 < e0 - 1e-3:
                sys.exit(f"{path}: overlapping spans on {threads[tid]}")
    def count(names, cat):
        return ", ".join(
            f"{n} {sum(e['name'] in (n, n + 'WithHidden') and e['cat'] == cat for e in spans)}"
            for n in names)
    if args.prefix:
        if args.track and args.track not in threads.values():
            sys.exit(f"{path}: no track '{args.track}' among {sorted(threads.values())}")
        counted = [e for e in spans
                   if not args.track or threads.get(e["tid"]) == args.track]
        counts = {p: sum(e["name"] == p or e["name"].startswith(p + " ")
                         for e in counted) for p in args.prefix}
        summary = ", ".join(f"{p} {n}" for p, n in counts.items())
        if args.track:
            summary = f"{args.track} {summary}"
        short = [p for p, n in counts.items() if n < args.at_least]
        if short:
            sys.exit(f"{path}: rank {rank.pop()}: {summary}: fewer than "
                     f"{args.at_least} of {', '.join(short)}")
    else:
        summary = (f"compute {count(EXPERTS, 'compute')}; communication "
                   f"{count(EXCHANGES, 'communication')}")
    print(f"rank {rank.pop()}: {summary}")
