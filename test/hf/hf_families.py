#!/usr/bin/env python3
"""HF transformers' own Qwen3-MoE and DeepSeek-V3 against moec (issue 19's
acceptance; issue 45's scaled RoPE: deepseek_v3_yarn, qwen3_moe_llama3),
with the current transformers from PyPI:

  hf_families.py make FAMILY DIR       a tiny random HF model, save_pretrained
                                       into DIR, and a batch of tokens there
  hf_families.py check DIR DUMP        HF's cross-entropy and gradients on the
                                       dump's batch against moe-run's step

`make` gives the router weights a larger scale so that no token's top-k is
within rounding of a tie, and (DeepSeek-V3) random selection biases, so
that the biased, group-limited selection is exercised. `check` loads DIR
with from_pretrained, computes the cross-entropy of the dump's targets,
backpropagates it through HF's modules and compares: the loss to 1e-4
relative, every parameter's gradient to 1e-4 (relative norm). moe-run's
dumps keep moec's layout, so the RoPE rows of an interleaved checkpoint
(rope_interleave) are de-interleaved here before comparing."""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

SEQ, BATCH = 16, 4


def deepseek_v3_config(**sizes):
    """The tiny DeepSeek-V3 of `make`, with `sizes` overriding its fields
    (fp8_checkpoint.py's has matrices of several 128 x 128 blocks)."""
    import transformers
    fields = dict(
        vocab_size=256, hidden_size=32, intermediate_size=64,
        moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
        n_shared_experts=1, n_group=2, topk_group=1, num_experts_per_tok=2,
        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=24,
        qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=6,
        routed_scaling_factor=2.5, max_position_embeddings=64)
    fields.update(sizes)
    return transformers.DeepseekV3Config(**fields)


def make(family, out):
    import transformers
    torch.manual_seed(1234)
    if family in ("qwen3_moe", "qwen3_moe_llama3"):
        # qwen3_moe_llama3: Llama 3's scaled RoPE over a pretraining
        # context of 8 < SEQ (transformers 5's rope_parameters).
        llama3 = {"rope_parameters": {
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8}} if family == "qwen3_moe_llama3" else {}
        config = transformers.Qwen3MoeConfig(
            vocab_size=256, hidden_size=32, intermediate_size=64,
            moe_intermediate_size=16, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=12,
            num_experts=8, num_experts_per_tok=3, norm_topk_prob=False,
            max_position_embeddings=64, **llama3)
        model = transformers.Qwen3MoeForCausalLM(config)
    elif family in ("deepseek_v3", "deepseek_v3_yarn"):
        # YaRN as DeepSeek-V3 publishes it (transformers 4's rope_scaling
        # with `type`), over a pretraining context of 8 < SEQ; mscale !=
        # mscale_all_dim so that both the cos/sin attention factor and the
        # softmax scale's correction differ from 1.
        yarn = {"rope_scaling": {
            "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
            "beta_fast": 32, "beta_slow": 1, "mscale": 0.707,
            "mscale_all_dim": 1.0}, "max_position_embeddings": 32} \
            if family == "deepseek_v3_yarn" else {}
        config = deepseek_v3_config(**yarn)
        model = transformers.DeepseekV3ForCausalLM(config)
    else:
        sys.exit(f"unknown family '{family}' (known: qwen3_moe, qwen3_moe_llama3, "
                 "deepseek_v3, deepseek_v3_yarn)")
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                tensor.normal_(0.0, 1.0)
        for name, tensor in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                tensor.uniform_(-0.1, 0.1)
    model.save_pretrained(out)
    if family == "deepseek_v3_yarn":
        # transformers 5 saves rope_parameters; DeepSeek-V3's published
        # config.json has transformers 4's rope_theta and rope_scaling.
        path = os.path.join(out, "config.json")
        saved = json.load(open(path))
        rope = saved.pop("rope_parameters")
        saved["rope_theta"] = rope.pop("rope_theta")
        rope.pop("rope_type")
        saved["rope_scaling"] = rope
        json.dump(saved, open(path, "w"), indent=2)
    tokens = torch.randint(0, config.vocab_size, (50000,), dtype=torch.int64)
    with open(os.path.join(out, "tokens.bin"), "wb") as f:
        f.write(tokens.to(torch.int16).numpy().astype("<u2").tobytes())
    print(f"made {type(model).__name__} in {out}")


def deinterleave(weight, group, offset, rope):
    """Rows of HF's interleaved RoPE layout in moec's: in each group of
    `group` rows, rows offset + 2i and offset + 2i + 1 become offset + i and
    offset + rope/2 + i."""
    rows = weight.reshape(-1, group, weight.shape[-1]).clone()
    part = rows[:, offset:offset + rope]
    rows[:, offset:offset + rope] = torch.cat([part[:, 0::2], part[:, 1::2]], dim=1)
    return rows.reshape(weight.shape)


def per_expert(model, params):
    """HF's parameter gradients under the checkpoint's names: transformers 5
    keeps each MoE layer's experts fused (experts.gate_up_proj [E, 2F, H],
    experts.down_proj [E, H, F]) where checkpoints, and moe-run, have one
    tensor per expert. The split is checked on the weights themselves."""
    grads = {}
    for name, parameter in model.named_parameters():
        grad = parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)
        prefix = name.rsplit(".", 1)[0]
        if name.endswith("experts.gate_up_proj"):
            width = parameter.shape[1] // 2
            pieces = {"gate_proj": slice(0, width), "up_proj": slice(width, 2 * width)}
        elif name.endswith("experts.down_proj"):
            pieces = {"down_proj": slice(None)}
        else:
            grads[name] = grad
            continue
        for e in range(parameter.shape[0]):
            for proj, rows in pieces.items():
                key = f"{prefix}.{e}.{proj}.weight"
                if not torch.equal(params[key], parameter.detach()[e, rows]):
                    sys.exit(f"HF's fused {name} does not hold {key} where expected")
                grads[key] = grad[e, rows]
    return grads


def check(model_dir, dump):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    config = model.config
    batch = load_file(os.path.join(dump, "batch.safetensors"))
    tokens, targets = batch["tokens"].long(), batch["targets"].long()
    logits = model(input_ids=tokens).logits
    ce = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
    ce.backward()
    ours = json.load(open(os.path.join(dump, "metrics.json")))["ce"]
    rel = abs(ce.item() - ours) / abs(ours)
    print(f"{type(model).__name__} cross-entropy {ce.item():.7f}, moe-run {ours:.7f}, rel {rel:.2e}")
    failures = [] if rel <= 1e-4 else ["cross-entropy"]

    grads = load_file(os.path.join(dump, "grads.safetensors"))
    params = load_file(os.path.join(dump, "params.safetensors"))
    hf = per_expert(model, params)
    if set(grads) != set(hf):
        sys.exit(f"gradient names differ: moe-run only {sorted(set(grads) - set(hf))}, "
                 f"HF only {sorted(set(hf) - set(grads))}")
    interleave = getattr(config, "rope_interleave", False) and hasattr(config, "kv_lora_rank")
    worst = (0.0, "")
    for name, theirs in hf.items():
        if interleave and name.endswith(("q_b_proj.weight", "q_proj.weight")):
            theirs = deinterleave(theirs, config.qk_nope_head_dim + config.qk_rope_head_dim,
                                  config.qk_nope_head_dim, config.qk_rope_head_dim)
        if interleave and name.endswith("kv_a_proj_with_mqa.weight"):
            theirs = deinterleave(theirs, config.kv_lora_rank + config.qk_rope_head_dim,
                                  config.kv_lora_rank, config.qk_rope_head_dim)
        mine = grads[name]
        err = ((mine - theirs).norm() / max(theirs.norm().item(), 1e-12)).item()
        worst = max(worst, (err, name))
        if err > 1e-4:
            failures.append(name)
    print(f"gradients of {len(hf)} parameters, largest relative difference {worst[0]:.2e} ({worst[1]})")
    if failures:
        sys.exit(f"FAIL: {', '.join(failures[:8])}")
    print("PASS: HF's cross-entropy and gradients")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
