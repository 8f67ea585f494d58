#!/usr/bin/env python3
"""Plant an error in a step dump: add noise of a given relative norm to one gradient.

Usage: perturb_grad.py DUMP_DIR TENSOR RELATIVE_NORM

grads.safetensors[TENSOR] += RELATIVE_NORM * |g| * n / |n| with n a fixed
normal draw, so that a checker whose tolerance is below RELATIVE_NORM must
name TENSOR (the reference tests use it to show that a check can fail)."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    d, name, scale = argv[0], argv[1], float(argv[2])
    path = os.path.join(d, "grads.safetensors")
    grads = safetensors_io.load(path)
    if name not in grads:
        print(f"error: {name} is not in {path} (known: {', '.join(sorted(grads)[:8])}, ...)", file=sys.stderr)
        return 1
    g = np.asarray(grads[name], np.float64)
    noise = np.random.default_rng(0).standard_normal(g.shape)
    grads[name] = (g + scale * np.linalg.norm(g) * noise / np.linalg.norm(noise)).astype(np.float32)
    safetensors_io.save(grads, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
