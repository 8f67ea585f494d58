#!/usr/bin/env python3
"""PyTorch eager baseline: one Mixtral-style MoE training step on the CPU.

Runs the same model as the numerical reference (test/reference/mixtral_reference.py:
HF Mixtral semantics, MoE layers grouping tokens per expert + index_add_ as in
HF's MixtralSparseMoeBlock) in float32: forward, backward, global-norm
clipping, warmup+cosine LR and torch.optim.AdamW with norm weights excluded
from weight decay.  Random tokens; warmup steps are not timed.

Usage (Debian's interpreter has torch):
  /usr/bin/python3 bench/torch_baseline.py --config CONFIG.json [--threads 2] [--warmup 3] [--steps 10]

CONFIG.json has the keys of a step dump's config.json (vocab, hidden, layers,
heads, kv_heads, experts, top_k, ffn, dense_layers, seq, batch, rms_eps,
rope_theta, aux_coef, capacity_factor, optimizer{...}, step).
Prints one JSON line:
  {"impl": "pytorch-eager", "step_s_median": .., "tokens_per_s": .., "steps": .., "threads": .., ...}
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "reference"))
import mixtral_reference as ref  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="model/optimizer config JSON")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init-std", type=float, default=0.02, help="weight init std (HF initializer_range)")
    ap.add_argument("--out", help="also write the JSON result to this file")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be >= 1")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with open(args.config) as f:
        cfg = ref.Config.from_dict(json.load(f))
    o = cfg.optimizer

    model = ref.MixtralForCausalLM(cfg)  # float32
    ref.init_params(model, args.seed, std=args.init_std)
    model.train()
    named = list(model.named_parameters())
    params = [p for _, p in named]
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in named if ref.is_decayed(n)], "weight_decay": o.weight_decay},
         {"params": [p for n, p in named if not ref.is_decayed(n)], "weight_decay": 0.0}],
        lr=ref.lr_at(cfg.step, o), betas=(o.beta1, o.beta2), eps=o.eps)

    # A few distinct random batches, generated outside the timed region.
    gen = torch.Generator().manual_seed(args.seed + 1)
    batches = []
    for _ in range(4):
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
        targets = torch.roll(tokens, -1, dims=1)
        targets[:, -1] = -100
        batches.append((tokens, targets))

    def train_step(i):
        lr = ref.lr_at(cfg.step + i, o)
        for group in opt.param_groups:
            group["lr"] = lr
        tokens, targets = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        out = model(tokens, targets)
        out["loss"].backward()
        if o.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, o.max_grad_norm)
        opt.step()
        return float(out["loss"])

    for i in range(args.warmup):
        train_step(i)
    times, losses = [], []
    for i in range(args.warmup, args.warmup + args.steps):
        t0 = time.perf_counter()
        losses.append(train_step(i))
        times.append(time.perf_counter() - t0)

    med = statistics.median(times)
    tokens_per_step = cfg.batch * cfg.seq
    result = {
        "impl": "pytorch-eager",
        "step_s_median": med,
        "tokens_per_s": tokens_per_step / med,
        "steps": args.steps,
        "threads": args.threads,
        "warmup": args.warmup,
        "step_s_min": min(times),
        "step_s_mean": statistics.fmean(times),
        "tokens_per_step": tokens_per_step,
        "params": sum(p.numel() for p in params),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "torch": torch.__version__,
        "config": os.path.abspath(args.config),
    }
    line = json.dumps(result)
    print(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
