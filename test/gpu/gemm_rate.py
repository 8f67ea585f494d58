#!/usr/bin/env python3
"""The GPU's BF16 GEMM rate as PyTorch reaches it, the second denominator
of test/gpu/run.sh's MFU: the median of 10 timed n^3 products (n = 8192 by
default) on random data (never zeros, which run faster) after 3 warm-ups,
timed with CUDA events. Prints FLOP/s on the last line.

--device cpu (run.sh --rehearse, where there is no GPU) times the same
products on PyTorch's CPU with the host clock, usually with a smaller
--size: the script's path is checked, not a rate anyone compares."""
import argparse
import statistics
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
parser.add_argument("--size", type=int, default=8192)
args = parser.parse_args()
if args.size < 1:
    parser.error(f"--size {args.size}: it must be positive")

n = args.size
a = torch.randn(n, n, device=args.device, dtype=torch.bfloat16)
b = torch.randn(n, n, device=args.device, dtype=torch.bfloat16)
for _ in range(3):
    torch.matmul(a, b)
times = []
for _ in range(10):
    if args.device == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    else:
        began = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - began)
name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
print(f"{name}: {n}^3 BF16 in {statistics.median(times) * 1e3:.3f} ms "
      "(median of 10)")
print(f"{2 * n ** 3 / statistics.median(times):.6e}")
