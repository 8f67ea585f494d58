#!/usr/bin/env python3
"""Fits each GPU's GEMM efficiency (hardware/gpus.yaml `gemm_efficiency`,
the fraction of the peak a full wave of full tiles reaches) to the training
set of runs.json, and only to it (issue 21).

For every GPU with training runs, it tries efficiencies from 0.30 to 0.95
in steps of 0.01 and keeps the one with the least mean absolute log error of
the predicted tokens/s per GPU. It prints the fitted value, the value the
hardware files hold, and the training errors at both. The test set is never
read. It exits 1 when a file's value differs from the fit by more than 0.01,
so that the fitted figures and the files stay one.

  bench/published/fit.py [--moec build/bin/moec]
"""
import argparse
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import predict  # noqa: E402


def held_efficiency(cluster_path, key):
    """The value the cluster file holds (its GEMM efficiency where it gives
    no FP8 one)."""
    with open(cluster_path) as f:
        text = f.read()
    match = re.search(rf"^\s*{key}:\s*([0-9.]+)", text, re.M) or \
        re.search(r"^\s*gemm_efficiency:\s*([0-9.]+)", text, re.M)
    return float(match.group(1))


def uses_fp8(run):
    return "fp8=1" in run["plan"]


def loss(rows):
    """The mean absolute log error: a run the model cannot describe (an
    outlier) pulls the fit less than under squares."""
    return sum(abs(math.log(p["tokens"] / run["reported_tokens_per_second_per_gpu"]))
               for run, p, _ in rows) / len(rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--moec", default=os.path.join(predict.ROOT, "build", "bin", "moec"))
    parser.add_argument("--runs", default=os.path.join(predict.HERE, "runs.json"))
    args = parser.parse_args()
    with open(args.runs) as f:
        training = [r for r in json.load(f)["runs"] if r.get("set") == "train"]
    by_gpu = {}
    for run in training:
        by_gpu.setdefault(predict.gpu_of(os.path.join(predict.ROOT, run["cluster"])),
                          []).append(run)
    ok = True
    for gpu, runs in sorted(by_gpu.items()):
        # BF16 GEMMs first, on the runs without FP8; then FP8's, on the runs
        # with it, at the fitted BF16 value (their attention and head are
        # BF16 GEMMs).
        fitted = []
        for key, subset in (("gemm_efficiency", [r for r in runs if not uses_fp8(r)]),
                            ("fp8_gemm_efficiency", [r for r in runs if uses_fp8(r)])):
            if not subset:
                continue

            def rows_at(efficiency):
                return predict.errors(args.moec, subset,
                                      fitted + [(gpu, key, f"{efficiency:.2f}")])
            # The loss is unimodal in the efficiency: a coarse pass, then a
            # fine one.
            coarse = min((loss(rows_at(e / 100)), e) for e in range(30, 96, 5))[1]
            best = min((loss(rows_at(e / 100)), e)
                       for e in range(max(30, coarse - 4), min(95, coarse + 4) + 1))[1] / 100
            held = held_efficiency(os.path.join(predict.ROOT, subset[0]["cluster"]), key)
            errors = ", ".join(f"{run['name']} {e:+.1f}%" for run, _, e in rows_at(best))
            print(f"{gpu}: fitted {key} {best:.2f} on {len(subset)} runs (held {held:.2f}); "
                  f"errors at the fit: {errors}")
            if abs(held - best) > 0.0101:
                print(f"  {gpu}: the hardware files hold {key} {held:.2f}, the fit says {best:.2f}")
                ok = False
            fitted.append((gpu, key, f"{best:.2f}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
