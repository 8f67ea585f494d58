#!/usr/bin/env python3
"""The GPU check's memory test: the scratch a run's instructions took from
the stream-ordered pool (moe-run's metrics, device_scratch_peak_mib, the
pool's high-water mark) against the kernel workspace the memory plan counts
for them (moec --report=memory, which includes cuBLASLt's 32 MiB workspace,
allocated apart). A plan that "fits" fits only if the first is within the
second.

Usage: check_scratch.py RUN.jsonl REPORT.txt
"""
import argparse
import json
import re
import sys

GEMM_WORKSPACE_MIB = 32.0

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("run")
parser.add_argument("report")
args = parser.parse_args()

peaks = []
with open(args.run) as f:
    for line in f:
        record = json.loads(line)
        if "device_scratch_peak_mib" in record:
            peaks.append(record["device_scratch_peak_mib"])
if not peaks:
    sys.exit(f"{args.run}: no device_scratch_peak_mib (not a GPU run?)")
with open(args.report) as f:
    found = re.search(r"kernel workspace\s+([0-9.]+) MiB", f.read())
if not found:
    sys.exit(f"{args.report}: no 'kernel workspace' line")
planned = float(found.group(1)) - GEMM_WORKSPACE_MIB
peak = max(peaks)
verdict = "within" if peak <= planned else "OVER"
print(f"peak scratch {peak:.1f} MiB {verdict} the planned {planned:.1f} MiB")
sys.exit(0 if peak <= planned else 1)
