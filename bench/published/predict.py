#!/usr/bin/env python3
"""Predicts every published run in runs.json with `moec --plan` and reports
the error against the published throughput (issue 8).

Each run fixes its whole plan (--plan-fix) and the behaviour of the software
that ran it (--plan-software); moec's cost model predicts tokens/s per GPU.
Every run in runs.json is reported; none is left out. Exits 1 when an error
exceeds --max-error percent.

  bench/published/predict.py [--moec build/bin/moec] [--max-error 15]
                             [--markdown bench/published/RESULTS.md]
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def predict(moec, run):
    command = [moec, os.path.join(HERE, run["model"]), "--plan", "--plan-only",
               "--plan-top", "1", "--plan-keep-over-memory",
               "--cluster", os.path.join(ROOT, run["cluster"]),
               "--gpus", str(run["gpus"]),
               "--global-batch", str(run["global_batch"]),
               # A published plan without context parallelism ran none.
               "--plan-fix", run["plan"] + ("" if "cp=" in run["plan"] else ",cp=1"),
               # Another software's run: predicted, not limited to what
               # moe-run's backend runs.
               "--plan-software", "runtime=other," + run["software"]]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{run['name']}: moec failed:\n{result.stderr}{result.stdout}")
    match = re.search(r"step ([0-9.e+-]+) s, ([0-9.]+) tokens/s per GPU, MFU ([0-9.]+)%, "
                      r"memory ([0-9.]+) of", result.stdout)
    if not match:
        raise RuntimeError(f"{run['name']}: no prediction in:\n{result.stdout}")
    return dict(step=float(match.group(1)), tokens=float(match.group(2)),
                mfu=float(match.group(3)), memory=float(match.group(4)),
                report=result.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--moec", default=os.path.join(ROOT, "build", "bin", "moec"))
    parser.add_argument("--runs", default=os.path.join(HERE, "runs.json"))
    parser.add_argument("--max-error", type=float, default=15.0)
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    with open(args.runs) as f:
        runs = json.load(f)["runs"]
    rows, worst = [], 0.0
    for run in runs:
        p = predict(args.moec, run)
        reported = run["reported_tokens_per_second_per_gpu"]
        error = 100.0 * (p["tokens"] - reported) / reported
        worst = max(worst, abs(error))
        published_memory = run.get("reported_memory_gib")
        rows.append((run["name"], run["gpus"], run["plan"], reported, p["tokens"], error, p["mfu"],
                     p["memory"], "-" if published_memory is None else f"{published_memory:.1f}"))
        if args.verbose:
            print(p["report"])
    header = ("| run | GPUs | plan | published tokens/s/GPU | predicted | error | predicted MFU "
              "| predicted memory GiB | published memory GiB |")
    lines = [header, "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for name, gpus, plan, reported, tokens, error, mfu, memory, published_memory in rows:
        lines.append(f"| {name} | {gpus} | {plan} | {reported:.1f} | {tokens:.1f} | {error:+.1f}% "
                     f"| {mfu:.1f}% | {memory:.1f} | {published_memory} |")
    table = "\n".join(lines)
    print(table)
    print(f"runs: {len(rows)}, largest error {worst:.1f}% (limit {args.max_error:.0f}%)")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Predicted against published throughput\n\n"
                    "Written by `bench/published/predict.py --markdown`; every run of runs.json.\n"
                    "Throughput is what the efficiencies were fitted to (one GEMM efficiency per GPU,\n"
                    "docs/cost-model.md); memory was not fitted and is shown as it comes out.\n\n")
            f.write(table + "\n\n")
            f.write(f"Largest error {worst:.1f}%.\n")
    return 0 if worst <= args.max_error else 1


if __name__ == "__main__":
    sys.exit(main())
