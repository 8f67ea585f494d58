#!/usr/bin/env python3
"""The fraction of communication time hidden behind compute, from moe-run
--trace files (one per rank): the time the communication track spends in
spans named by --comm while the compute track runs spans named by --compute,
over all the time spent in the former. The communication thread of
--async-collectives has a track of its own ("communication (async)"), which
counts alongside. By default: expert dispatch and combine
behind expert kernels. Prints one line per rank and the total; `--min F` exits
1 if the total is below F."""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("traces", nargs="+")
parser.add_argument("--min", type=float, default=None)
parser.add_argument("--comm", action="append", default=None,
                    help="name prefix of communication spans")
parser.add_argument("--compute", action="append", default=None,
                    help="name prefix of compute spans")
args = parser.parse_args()
COMM = args.comm or ["expert dispatch", "expert combine"]
COMPUTE = args.compute or ["Experts"]


def intervals(events, track, prefixes):
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e["ph"] == "X" and e["cat"] == track
                  and any(e["name"].startswith(p) for p in prefixes))


def overlap(spans, cover):
    """Total length of `spans` inside `cover` (spans of one track, which do
    not overlap each other)."""
    total = 0.0
    for start, end in spans:
        for c_start, c_end in cover:
            if c_end <= start or c_start >= end:
                continue
            total += min(end, c_end) - max(start, c_start)
    return total


hidden_all = exchange_all = 0.0
for path in args.traces:
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    experts = intervals(events, "compute", COMPUTE)
    exchange = hidden = 0.0
    for track in ("communication", "communication (async)"):
        exchanges = intervals(events, track, COMM)
        exchange += sum(end - start for start, end in exchanges)
        hidden += overlap(exchanges, experts)
    hidden_all += hidden
    exchange_all += exchange
    rank = next(e["pid"] for e in events if e["ph"] == "X")
    share = hidden / exchange if exchange else 0.0
    print(f"rank {rank}: communication {exchange / 1000:.2f} ms, hidden "
          f"{hidden / 1000:.2f} ms ({share:.0%})")
total = hidden_all / exchange_all if exchange_all else 0.0
print(f"all ranks: {total:.0%} of the {', '.join(COMM)} time hidden behind "
      f"{', '.join(COMPUTE) or 'compute'}")
if args.min is not None and total < args.min:
    sys.exit(f"below {args.min:.0%}")
