#!/usr/bin/env python3
"""The benchmarks' peer (test/gpu/run.sh, issue 17; bench/run.sh, issue 18):
the model of a moec artifact as HF transformers' MixtralForCausalLM, trained
in PyTorch as its users do: fp32 master weights, BF16 autocast when the
artifact computes in BF16 (fp32 otherwise), SDPA attention, AdamW (fused on
a GPU) with the artifact's schedule and global-norm clipping, on batches of
the same token file moe-run reads. Each step (forward, backward, clip,
optimizer) is timed after --warmup steps (CUDA events on a GPU); prints the
median on the last line and writes one JSON line per step. On the CPU,
--threads sets PyTorch's intra-op threads and --compile runs the model under
torch.compile.

The model comes from the artifact's config JSON (`moe-run --model-config
MODEL.moebin`): vocab, hidden, layers, heads, kv_heads,
experts, top_k, ffn, seq, batch, rms_eps, rope_theta, aux_coef and the
optimizer. Dense layers (moec's dense_layers) have no MixtralConfig
equivalent and are refused.

Usage: python3 bench/gpu_torch_peer.py --config CONFIG.json --data TOKENS.bin
         [--steps 8] [--warmup 2] [--metrics OUT.jsonl] [--device cuda]
         [--threads N] [--compile]
"""
import argparse
import json
import math
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

# What `moe-run --model-config` writes.
KNOWN = {"name", "vocab", "hidden", "layers", "heads", "kv_heads", "experts",
         "top_k", "ffn", "dense_ffn", "dense_layers", "seq", "batch", "rms_eps",
         "rope_theta", "aux_coef", "capacity_factor", "init_std", "optimizer",
         "precision"}
# The fields of other model families (and moe-run's extra losses), each with
# the value that means "as Mixtral": the peer refuses any other value.
AS_MIXTRAL = {"family": "mixtral", "scoring": "softmax", "norm_topk_prob": True,
              "shared_experts": 0, "q_lora_rank": 0, "kv_lora_rank": 0,
              "qk_nope_head_dim": 0, "qk_rope_head_dim": 0, "v_head_dim": 0,
              "qk_norm": False, "n_group": 1, "topk_group": 1,
              "routed_scaling_factor": 1, "bias_update_rate": 0,
              "seq_aux_coef": 0, "z_loss_coef": 0, "document_mask": False,
              "rope_interleave": False, "tie_word_embeddings": False}
# Read by no training step: the end-of-sequence token.
IGNORED = {"eos_token_id"}
KNOWN_OPTIMIZER = {"lr_peak", "lr_min", "warmup", "decay", "beta1", "beta2",
                   "eps", "weight_decay", "max_grad_norm"}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True, help="flat uint16 token file")
    ap.add_argument("--steps", type=int, default=8, help="steps in all")
    ap.add_argument("--warmup", type=int, default=2, help="untimed first steps")
    ap.add_argument("--metrics")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0,
                    help="PyTorch's intra-op threads (0: its default)")
    ap.add_argument("--compile", action="store_true",
                    help="run the model under torch.compile")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.steps <= args.warmup:
        ap.error("--steps must exceed --warmup")
    from transformers import MixtralConfig, MixtralForCausalLM

    with open(args.config) as f:
        cfg = json.load(f)
    unknown = sorted(set(cfg) - KNOWN - set(AS_MIXTRAL) - IGNORED - {"head_dim"})
    if unknown:
        sys.exit(f"{args.config}: unknown config fields {unknown}; known: "
                 f"{sorted(KNOWN | set(AS_MIXTRAL) | IGNORED | {'head_dim'})}")
    for field, mixtral in AS_MIXTRAL.items():
        if field in cfg and cfg[field] != mixtral:
            sys.exit(f"{args.config}: {field} {cfg[field]!r}: "
                     f"MixtralForCausalLM has {mixtral!r}")
    if "head_dim" in cfg and cfg["head_dim"] * cfg["heads"] != cfg["hidden"]:
        sys.exit(f"{args.config}: head_dim {cfg['head_dim']} x {cfg['heads']} "
                 f"heads is not hidden {cfg['hidden']}: MixtralForCausalLM "
                 "splits hidden over its heads")
    unknown = sorted(set(cfg.get("optimizer", {})) - KNOWN_OPTIMIZER)
    if unknown:
        sys.exit(f"{args.config}: unknown optimizer fields {unknown}; known: "
                 f"{sorted(KNOWN_OPTIMIZER)}")
    # As the artifact computes: BF16 autocast with fp32 masters (and fp32
    # gradient reductions, none on one device), as moec's --precision=bf16,
    # or fp32.
    compute = cfg.get("precision", {}).get("compute", "fp32")
    if compute not in ("bf16", "fp32"):
        sys.exit(f"{args.config}: precision compute '{compute}': the peer "
                 "trains in fp32 or BF16 autocast")
    if cfg.get("capacity_factor"):
        sys.exit(f"{args.config}: capacity_factor {cfg['capacity_factor']}: "
                 "MixtralForCausalLM drops no tokens")
    if cfg.get("dense_layers"):
        sys.exit(f"{args.config}: dense_layers {cfg['dense_layers']}: "
                 "MixtralForCausalLM has no dense layers")
    opt_cfg = cfg.get("optimizer", {})
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    config = MixtralConfig(
        vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
        intermediate_size=cfg["ffn"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
        num_local_experts=cfg["experts"], num_experts_per_tok=cfg["top_k"],
        max_position_embeddings=cfg["seq"], rms_norm_eps=cfg.get("rms_eps", 1e-5),
        rope_theta=cfg.get("rope_theta", 10000.0),
        router_aux_loss_coef=cfg.get("aux_coef", 0.0), output_router_logits=True,
        tie_word_embeddings=False, initializer_range=cfg.get("init_std", 0.02),
        attn_implementation="sdpa")
    model = MixtralForCausalLM(config).to(device=device, dtype=torch.float32)
    model.train()
    forward = torch.compile(model) if args.compile else model
    params = list(model.parameters())
    decayed = [p for n, p in model.named_parameters() if p.ndim >= 2]
    others = [p for n, p in model.named_parameters() if p.ndim < 2]
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(
        [{"params": decayed, "weight_decay": opt_cfg.get("weight_decay", 0.0)},
         {"params": others, "weight_decay": 0.0}],
        lr=opt_cfg.get("lr_peak", 3e-4), betas=(opt_cfg.get("beta1", 0.9), opt_cfg.get("beta2", 0.95)),
        eps=opt_cfg.get("eps", 1e-8), fused=fused)
    max_norm = opt_cfg.get("max_grad_norm", 0.0)

    tokens = np.memmap(args.data, dtype=np.uint16, mode="r")
    batch, seq = cfg["batch"], cfg["seq"]
    if len(tokens) < seq + 1:
        sys.exit(f"{args.data}: {len(tokens)} tokens, fewer than seq + 1 = {seq + 1}")
    rng = np.random.default_rng(args.seed)

    def sample():
        starts = rng.integers(0, len(tokens) - seq - 1, size=batch)
        rows = np.stack([np.asarray(tokens[s:s + seq + 1], dtype=np.int64) for s in starts])
        rows = torch.from_numpy(rows).to(device)
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()

    def step():
        x, y = sample()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                            enabled=compute == "bf16"):
            out = forward(input_ids=x, output_router_logits=True)
        loss = F.cross_entropy(out.logits.float().view(-1, config.vocab_size), y.view(-1))
        if out.aux_loss is not None and config.router_aux_loss_coef:
            loss = loss + config.router_aux_loss_coef * out.aux_loss.float()
        loss.backward()
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        opt.step()
        return loss

    records = []
    for i in range(args.steps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step()
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            loss = step()
            seconds = time.perf_counter() - t0
        value = float(loss.detach())
        if not math.isfinite(value):
            sys.exit(f"step {i + 1}: loss {value} is not finite")
        records.append({"step": i + 1, "loss": value, "step_s": seconds,
                        "tokens_per_s": batch * seq / seconds,
                        "warmup": i < args.warmup})
    if args.metrics:
        with open(args.metrics, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    timed = [r["step_s"] for r in records if not r["warmup"]]
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    if device.type == "cpu":
        name = f"cpu, {torch.get_num_threads()} threads" + (
            ", torch.compile" if args.compile else "")
    print(f"PyTorch {torch.__version__} MixtralForCausalLM on {name}: "
          f"{sum(p.numel() for p in params) / 1e9:.2f}B parameters, loss "
          f"{records[0]['loss']:.3f} -> {records[-1]['loss']:.3f}")
    print(f"median step {statistics.median(timed) * 1e3:.1f} ms over {len(timed)} steps "
          f"({batch * seq / statistics.median(timed):.0f} tokens/s)")


if __name__ == "__main__":
    main()
