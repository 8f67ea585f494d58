#!/usr/bin/env python3
"""Exits 0 iff training each artifact ends, on average over seeds, where the
reference artifact's training ends: a two-sample test whose bound comes from
the runs' own seed-to-seed spread, not from one measurement.

Each artifact is trained with moe-run (from PATH) for --seeds seeds, seed s
setting both the parameter initialisation (--seed s) and the batches
(--data-seed s); a run's result is the mean loss of its last --last steps.
One run's end value is a random variable: its trajectory diverges from any
other's after a few dozen steps (last-bit differences, top-k routing), so
the test compares the means over seeds.

The test: with means m_ref, m_run and sample variances v_ref, v_run over S
seeds each, Welch's statistic t = (m_run - m_ref) / sqrt(v_ref / S +
v_run / S) follows Student's t distribution under a normal model of the end
losses when both artifacts train alike (Welch-Satterthwaite degrees of
freedom). The run fails when |t| exceeds the quantile k whose two-sided tail
is --false-failure (1e-6): when the artifacts train alike, at most one run
in a million fails. k is computed here from the t distribution (the
regularised incomplete beta function), so it follows the degrees of freedom
the spreads give.

Prints each artifact's mean and standard deviation, and the difference with
its standard error, t and k.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

parser = argparse.ArgumentParser()
parser.add_argument("reference", help="the artifact to compare with (fp32)")
parser.add_argument("runs", nargs="+", help="the artifacts compared with it")
parser.add_argument("--data", required=True)
parser.add_argument("--seeds", type=int, default=16)
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--last", type=int, default=20)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--jobs", type=int, default=2,
                    help="moe-run processes at once")
parser.add_argument("--false-failure", type=float, default=1e-6)
parser.add_argument("--report-within", type=float, default=None,
                    help="also report whether each mean is within this "
                         "fraction of the reference mean (a benchmark's "
                         "target; not the test's pass criterion, which is "
                         "the t test)")
args = parser.parse_args()
if args.seeds < 3:
    sys.exit("--seeds: at least 3 (a spread needs several)")


def betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b) (Numerical
    Recipes' continued fraction, evaluated by the modified Lentz method)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) +
                     a * math.log(x) + b * math.log(1.0 - x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 1000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x /
                          ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def two_sided_tail(t, df):
    """P(|T| > t) for Student's t with df degrees of freedom."""
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def quantile(tail, df):
    """The k with P(|T| > k) = tail, by bisection."""
    lo, hi = 0.0, 1.0
    while two_sided_tail(hi, df) > tail:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if two_sided_tail(mid, df) > tail:
            lo = mid
        else:
            hi = mid
    return hi


def end_loss(artifact, seed, workdir):
    metrics = os.path.join(workdir, f"{os.path.basename(artifact)}.{seed}.jsonl")
    command = ["moe-run", artifact, "--data", args.data, "--steps",
               str(args.steps), "--threads", str(args.threads), "--seed",
               str(seed), "--data-seed", str(seed), "--metrics", metrics,
               "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr}")
    with open(metrics) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if len(records) < args.last:
        sys.exit(f"{metrics}: {len(records)} steps, fewer than {args.last}")
    return sum(r["loss"] for r in records[-args.last:]) / args.last


seeds = range(1, args.seeds + 1)
with tempfile.TemporaryDirectory() as workdir, \
        ThreadPoolExecutor(args.jobs) as pool:
    artifacts = [args.reference] + args.runs
    futures = {a: [pool.submit(end_loss, a, s, workdir) for s in seeds]
               for a in artifacts}
    ends = {a: [f.result() for f in fs] for a, fs in futures.items()}

S = args.seeds
ref = ends[args.reference]
m_ref, v_ref = statistics.mean(ref), statistics.variance(ref)
print(f"{os.path.basename(args.reference)}: mean loss of the last {args.last} "
      f"of {args.steps} steps over {S} seeds {m_ref:.4f}, "
      f"sd {math.sqrt(v_ref):.4f}")
failed = False
for artifact in args.runs:
    run = ends[artifact]
    m_run, v_run = statistics.mean(run), statistics.variance(run)
    se = math.sqrt(v_ref / S + v_run / S)
    df = (v_ref / S + v_run / S) ** 2 / (
        (v_ref / S) ** 2 / (S - 1) + (v_run / S) ** 2 / (S - 1))
    k = quantile(args.false_failure, df)
    t = (m_run - m_ref) / se
    ok = abs(t) <= k
    failed |= not ok
    print(f"{os.path.basename(artifact)}: {m_run:.4f}, sd {math.sqrt(v_run):.4f}; "
          f"difference {m_run - m_ref:+.4f} ({(m_run - m_ref) / m_ref:+.1%}), "
          f"standard error {se:.4f}, t {t:+.2f}, "
          f"{'within' if ok else 'beyond'} k {k:.2f} "
          f"(false failure {args.false_failure:g}, {df:.1f} degrees of freedom)")
    if args.report_within is not None:
        relative = abs(m_run - m_ref) / m_ref
        print(f"{os.path.basename(artifact)}: mean {relative:.2%} from the "
              f"reference mean ({'within' if relative <= args.report_within else 'beyond'} "
              f"{args.report_within:.0%}); reference seed-to-seed sd "
              f"{math.sqrt(v_ref) / m_ref:.2%} of its mean")
sys.exit(1 if failed else 0)
