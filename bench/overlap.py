#!/usr/bin/env python3
"""The fraction of expert all-to-all time hidden behind expert compute, from
moe-run --trace files (one per rank): the time the communication track spends
in expert dispatch and combine while the compute track runs an expert kernel,
over all the time spent in expert dispatch and combine. Prints one line per
rank and the total; `--min F` exits 1 if the total is below F."""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("traces", nargs="+")
parser.add_argument("--min", type=float, default=None)
args = parser.parse_args()


def intervals(events, track, prefixes):
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e["ph"] == "X" and e["cat"] == track
                  and any(e["name"].startswith(p) for p in prefixes))


def overlap(spans, cover):
    """Total length of `spans` inside the union of `cover` (both sorted)."""
    total, j = 0.0, 0
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
    exchanges = intervals(events, "communication",
                          ["expert dispatch", "expert combine"])
    experts = intervals(events, "compute", ["Experts"])
    exchange = sum(end - start for start, end in exchanges)
    hidden = overlap(exchanges, experts)
    hidden_all += hidden
    exchange_all += exchange
    rank = next(e["pid"] for e in events if e["ph"] == "X")
    share = hidden / exchange if exchange else 0.0
    print(f"rank {rank}: all-to-all {exchange / 1000:.2f} ms, hidden "
          f"{hidden / 1000:.2f} ms ({share:.0%})")
total = hidden_all / exchange_all if exchange_all else 0.0
print(f"all ranks: {total:.0%} of the expert all-to-all time hidden behind "
      "expert compute")
if args.min is not None and total < args.min:
    sys.exit(f"below {args.min:.0%}")
