#!/usr/bin/env python3
"""The GPU's BF16 GEMM rate as PyTorch reaches it, the second denominator
of test/gpu/run.sh's MFU: the median of 10 timed 8192^3 products on random
data (never zeros, which run faster) after 3 warm-ups, timed with CUDA
events. Prints FLOP/s on the last line."""
import statistics

import torch

n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    torch.matmul(a, b)
times = []
for _ in range(10):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.matmul(a, b)
    end.record()
    torch.cuda.synchronize()
    times.append(start.elapsed_time(end) / 1e3)
print(f"{torch.cuda.get_device_name()}: {n}^3 BF16 in "
      f"{statistics.median(times) * 1e3:.3f} ms (median of 10)")
print(f"{2 * n ** 3 / statistics.median(times):.6e}")
