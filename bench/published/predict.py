#!/usr/bin/env python3
"""Predicts every published run in runs.json with `moec --plan` and reports
the error against the published throughput (issues 8 and 21).

Each run fixes its whole plan (--plan-fix) and the behaviour of the software
that ran it (--plan-software); moec's cost model predicts tokens/s per GPU.
The runs are in two disjoint sets: "train", which bench/published/fit.py
fits the GPUs' GEMM efficiencies to, and "test", which nothing is fitted
to. Both tables are printed; none of the runs is left out. Exits 1 when a
test run's error exceeds --max-error percent, or a training run's exceeds
--max-train-error.

  bench/published/predict.py [--moec build/bin/moec] [--max-error 10]
                             [--max-train-error 10] [--set train|test]
                             [--override GPU.KEY=VALUE ...]
                             [--markdown bench/published/RESULTS.md]

--override replaces a hardware value for this prediction only, in the
cluster file of every run whose GPU it names (`H100-80GB-SXM.gemm_efficiency
=0.7`), or in every cluster file (`*.nvlink_contention=0.1`).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def gpu_of(cluster_path):
    """The name of the cluster file's GPU."""
    with open(cluster_path) as f:
        match = re.search(r"^gpu:\s*\n\s+name:\s*(\S+)", f.read(), re.M)
    if not match:
        raise RuntimeError(f"{cluster_path}: no gpu name")
    return match.group(1)


def cluster_with(cluster_path, overrides, scratch):
    """The cluster file, or a copy of it with `overrides` applied: a list of
    (gpu or "*", key, value)."""
    gpu = gpu_of(cluster_path)
    mine = [(key, value) for name, key, value in overrides if name in (gpu, "*")]
    if not mine:
        return cluster_path
    with open(cluster_path) as f:
        text = f.read()
    for key, value in mine:
        text, count = re.subn(rf"^(\s*){re.escape(key)}:.*$",
                              lambda m: f"{m.group(1)}{key}: {value}", text, flags=re.M)
        if count == 0 and key.endswith("_efficiency"):
            # A GPU key the file leaves at its default: beside the others.
            text, count = re.subn(r"^(\s*)gemm_efficiency:.*$",
                                  lambda m: f"{m.group(0)}\n{m.group(1)}{key}: {value}",
                                  text, flags=re.M)
        if count == 0:
            # A cluster key the file leaves at its default.
            text += f"\n{key}: {value}\n"
    path = os.path.join(scratch, os.path.basename(cluster_path))
    with open(path, "w") as f:
        f.write(text)
    return path


def predict(moec, run, overrides=(), scratch=None):
    cluster = cluster_with(os.path.join(ROOT, run["cluster"]), overrides, scratch)
    command = [moec, os.path.join(HERE, run["model"]), "--plan", "--plan-only",
               "--plan-top", "1", "--plan-keep-over-memory",
               "--cluster", cluster,
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


def parse_overrides(entries):
    overrides = []
    for entry in entries or []:
        target, _, value = entry.partition("=")
        name, _, key = target.rpartition(".")
        if not name or not key or not value:
            raise SystemExit(f"--override {entry}: expected GPU.KEY=VALUE")
        overrides.append((name, key, value))
    return overrides


def errors(moec, runs, overrides=()):
    """Each run with its prediction and its error in percent."""
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for run in runs:
            p = predict(moec, run, overrides, scratch)
            reported = run["reported_tokens_per_second_per_gpu"]
            rows.append((run, p, 100.0 * (p["tokens"] - reported) / reported))
    return rows


def table(rows):
    lines = ["| run | MoE | GPUs | GPU | plan | published tokens/s/GPU | predicted | error "
             "| predicted MFU | predicted memory GiB | published memory GiB |",
             "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for run, p, error in rows:
        memory = run.get("reported_memory_gib")
        lines.append(
            f"| {run['name']} | {'yes' if run.get('moe') else 'no'} | {run['gpus']} "
            f"| {gpu_of(os.path.join(ROOT, run['cluster']))} | {run['plan']} "
            f"| {run['reported_tokens_per_second_per_gpu']:.1f} | {p['tokens']:.1f} "
            f"| {error:+.1f}% | {p['mfu']:.1f}% | {p['memory']:.1f} "
            f"| {'-' if memory is None else f'{memory:.1f}'} |")
    return "\n".join(lines)


def summary(rows):
    if not rows:
        return "no runs"
    worst = max(abs(e) for _, _, e in rows)
    mean = sum(abs(e) for _, _, e in rows) / len(rows)
    moe = sum(1 for run, _, _ in rows if run.get("moe"))
    within = sum(1 for _, _, e in rows if abs(e) <= 10.0)
    return (f"{len(rows)} runs ({moe} MoE), mean |error| {mean:.1f}%, "
            f"largest {worst:.1f}%, {within} of {len(rows)} within 10%")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--moec", default=os.path.join(ROOT, "build", "bin", "moec"))
    parser.add_argument("--runs", default=os.path.join(HERE, "runs.json"))
    parser.add_argument("--max-error", type=float, default=10.0,
                        help="limit on a test run's error, percent")
    parser.add_argument("--max-train-error", type=float, default=10.0)
    parser.add_argument("--set", choices=["train", "test"])
    parser.add_argument("--override", action="append")
    parser.add_argument("--markdown", help="also write the tables here")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    with open(args.runs) as f:
        runs = json.load(f)["runs"]
    for run in runs:
        if run.get("set") not in ("train", "test"):
            raise SystemExit(f"{run['name']}: 'set' must be train or test")
    overrides = parse_overrides(args.override)
    sets = [args.set] if args.set else ["train", "test"]
    results, ok = {}, True
    for name in sets:
        rows = errors(args.moec, [r for r in runs if r["set"] == name], overrides)
        results[name] = rows
        limit = args.max_error if name == "test" else args.max_train_error
        print(f"## {name}ing set" if name == "train" else "## test set")
        print(table(rows))
        print(f"{summary(rows)} (limit {limit:.0f}%)\n")
        if args.verbose:
            for run, p, _ in rows:
                print(run["name"]); print(p["report"])
        if any(abs(e) > limit for _, _, e in rows):
            ok = False
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Predicted against published throughput\n\n"
                    "Written by `bench/published/predict.py --markdown`; every run of runs.json.\n"
                    "The GPUs' GEMM efficiencies are fitted to the training set only\n"
                    "(`bench/published/fit.py`, docs/cost-model.md); the test set is out of sample.\n"
                    "A run's `recipe` field gives the settings read from its software's release\n"
                    "(Megatron-Bridge's performance configs at the release tag).\n"
                    "Memory was not fitted and is shown as it comes out.\n\n")
            for name, rows in results.items():
                f.write(f"## {'Training' if name == 'train' else 'Test'} set\n\n")
                f.write(table(rows) + "\n\n" + summary(rows) + ".\n\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
