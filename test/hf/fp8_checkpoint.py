#!/usr/bin/env python3
"""DeepSeek-V3's block-quantized FP8 checkpoints for moe-run --load (issue 45):

  fp8_checkpoint.py make DIR          a tiny random DeepseekV3ForCausalLM,
                                      saved twice: DIR/fp8 in DeepSeek-V3's
                                      FP8 format, DIR/bf16 its dequantized
                                      BF16 weights; tokens in DIR/tokens.bin
  fp8_checkpoint.py break DIR KIND    DIR/KIND: DIR/fp8 damaged one way (or,
                                      "mtp", with a multi-token-prediction
                                      layer as DeepSeek-V3's has)
  fp8_checkpoint.py shard DIR         DIR/sharded: DIR/fp8 in two files, the
                                      scales apart from their weights
  fp8_checkpoint.py same A B          the F32 tensors of files A and B are
                                      equal bit for bit (moe-run's step
                                      dumps after loading DIR/fp8 and
                                      DIR/bf16)

The format (DeepSeek-V3's README_WEIGHTS.md and inference/kernel.py): each
linear weight of attention and the MLPs, experts included, is stored as
torch.float8_e4m3fn beside `<name>_scale_inv`, F32 of shape
[ceil(out/128), ceil(in/128)]; an element is its code times its 128x128
block's scale, edge blocks partial. The embeddings, the norms, the router
(mlp.gate) and lm_head stay BF16. The scales here are DeepSeek's
(amax / 448 per block), the reference dequantization its fp8_cast_bf16.py's:
fp32 code times fp32 scale, rounded to BF16. The sizes put several blocks
in a matrix and block edges inside the slices of a two-way split (hidden
136: 68 columns per rank, one 128-column block across both)."""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

BLOCK = 128
QUANTIZATION = {"activation_scheme": "dynamic", "fmt": "e4m3",
                "quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK]}


def quantized(name, tensor):
    """Whether DeepSeek-V3's checkpoint stores `name` in FP8."""
    return (tensor.dim() == 2 and name.endswith(".weight")
            and "embed_tokens" not in name and not name.startswith("lm_head")
            and not name.endswith("mlp.gate.weight"))


def block_scales(scale, rows, cols):
    """Each element's scale: its block's, edge blocks cut to the matrix."""
    return (scale.repeat_interleave(BLOCK, 0)[:rows]
            .repeat_interleave(BLOCK, 1)[:, :cols])


def quantize(weight):
    rows, cols = weight.shape
    padded = torch.zeros(-(-rows // BLOCK) * BLOCK, -(-cols // BLOCK) * BLOCK)
    padded[:rows, :cols] = weight.float()
    blocks = padded.reshape(padded.shape[0] // BLOCK, BLOCK,
                            padded.shape[1] // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = (amax / torch.finfo(torch.float8_e4m3fn).max).float()
    codes = (weight.float() / block_scales(scale, rows, cols)).to(torch.float8_e4m3fn)
    return codes, scale


def dequantize(codes, scale):
    rows, cols = codes.shape
    return (codes.float() * block_scales(scale, rows, cols)).to(torch.bfloat16)


def every_code(codes):
    """`codes` with its first 254 elements (rows 0 and 1) holding each
    finite E4M3 code once: moe-run's decoding is checked against torch's on
    every value, subnormals and -0 included."""
    finite = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F],
                          dtype=torch.uint8)
    bits = codes.view(torch.uint8).clone().flatten()
    bits[:finite.numel()] = finite
    return bits.reshape(codes.shape).view(torch.float8_e4m3fn)


def make(out):
    import transformers
    from hf_families import deepseek_v3_config
    torch.manual_seed(4321)
    config = deepseek_v3_config(hidden_size=136, intermediate_size=200,
                                moe_intermediate_size=24, n_routed_experts=4)
    model = transformers.DeepseekV3ForCausalLM(config)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                tensor.normal_(0.0, 1.0)
    model.save_pretrained(os.path.join(out, "hf"))
    weights = load_file(os.path.join(out, "hf", "model.safetensors"))
    fp8, bf16 = {}, {}
    for name, tensor in weights.items():
        if quantized(name, tensor):
            codes, scale = quantize(tensor)
            if name == WEIGHT:
                codes = every_code(codes)
            fp8[name], fp8[name + "_scale_inv"] = codes, scale
            bf16[name] = dequantize(codes, scale)
        else:
            fp8[name] = bf16[name] = tensor.to(torch.bfloat16)
    with open(os.path.join(out, "hf", "config.json")) as f:
        hf_config = json.load(f)
    for kind, tensors in (("fp8", fp8), ("bf16", bf16)):
        os.makedirs(os.path.join(out, kind), exist_ok=True)
        save_file(tensors, os.path.join(out, kind, "model.safetensors"),
                  metadata={"format": "pt"})
        written = dict(hf_config)
        if kind == "fp8":
            written["quantization_config"] = QUANTIZATION
        with open(os.path.join(out, kind, "config.json"), "w") as f:
            json.dump(written, f, indent=2)
    shutil.rmtree(os.path.join(out, "hf"))
    tokens = torch.randint(0, config.vocab_size, (50000,), dtype=torch.int64)
    with open(os.path.join(out, "tokens.bin"), "wb") as f:
        f.write(tokens.to(torch.int16).numpy().astype("<u2").tobytes())
    count = sum(1 for name in fp8 if name.endswith("_scale_inv"))
    print(f"made {count} FP8 weights in {out}")


# A quantized weight with several blocks: [200, 136], blocks [2, 2].
WEIGHT = "model.layers.0.mlp.gate_proj.weight"


def damage(source, kind, tensors, config):
    scale = WEIGHT + "_scale_inv"
    if kind == "no-scale":
        del tensors[scale]
    elif kind == "scale-shape":
        tensors[scale] = tensors[scale][:1].contiguous()
    elif kind == "nan-scale":
        tensors[scale] = tensors[scale].clone()
        tensors[scale][1, 0] = float("nan")
    elif kind == "nan-code":
        # 0x7f: E4M3's NaN.
        codes = tensors[WEIGHT].view(torch.uint8).clone()
        codes[130, 5] = 0x7F
        tensors[WEIGHT] = codes.view(torch.float8_e4m3fn)
    elif kind == "no-config":
        del config["quantization_config"]
    elif kind == "block-size":
        config["quantization_config"]["weight_block_size"] = [64, 64]
    elif kind == "bf16-scaled":
        tensors[WEIGHT] = tensors[WEIGHT].to(torch.bfloat16)
    elif kind == "scale-dtype":
        tensors[scale] = tensors[scale].to(torch.bfloat16)
    elif kind == "method":
        config["quantization_config"]["quant_method"] = "gptq"
    elif kind in ("mtp", "mtp-unnamed"):
        # DeepSeek-V3's multi-token-prediction layer after the model's
        # (layer 61 of 61): a copy of the last layer with its own FP8
        # projection and norms. Loaded past as HF does, where the config
        # names it (num_nextn_predict_layers).
        last = config["num_hidden_layers"] - 1
        prefix, mtp = f"model.layers.{last}.", f"model.layers.{last + 1}."
        for name in [n for n in tensors if n.startswith(prefix)]:
            tensors[mtp + name[len(prefix):]] = tensors[name].clone()
        hidden = config["hidden_size"]
        codes, scale = quantize(torch.randn(hidden, 2 * hidden))
        tensors[mtp + "eh_proj.weight"] = codes
        tensors[mtp + "eh_proj.weight_scale_inv"] = scale
        for norm in ("enorm", "hnorm", "shared_head.norm"):
            tensors[mtp + norm + ".weight"] = torch.ones(hidden, dtype=torch.bfloat16)
        if kind == "mtp-unnamed":
            config["num_nextn_predict_layers"] = 0
    else:
        sys.exit(f"unknown damage '{kind}'")


def break_checkpoint(directory, kind):
    tensors = load_file(os.path.join(directory, "fp8", "model.safetensors"))
    with open(os.path.join(directory, "fp8", "config.json")) as f:
        config = json.load(f)
    damage(directory, kind, tensors, config)
    out = os.path.join(directory, kind)
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def shard(directory):
    """DIR/sharded: DIR/fp8 in two files with an index, every scale in the
    file after its weight's, as a large checkpoint may split them."""
    tensors = load_file(os.path.join(directory, "fp8", "model.safetensors"))
    out = os.path.join(directory, "sharded")
    os.makedirs(out, exist_ok=True)
    files = ("model-00001-of-00002.safetensors",
             "model-00002-of-00002.safetensors")
    parts = ({}, {})
    for name, tensor in tensors.items():
        parts[name.endswith("_scale_inv")][name] = tensor
    for part, file in zip(parts, files):
        save_file(part, os.path.join(out, file), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {
        name: files[i] for i, part in enumerate(parts) for name in part}}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    shutil.copy(os.path.join(directory, "fp8", "config.json"), out)


def same(ours_path, reference_path):
    ours, reference = load_file(ours_path), load_file(reference_path)
    if set(ours) != set(reference):
        sys.exit(f"names differ: {sorted(set(ours) ^ set(reference))}")
    for name, tensor in reference.items():
        if not torch.equal(ours[name].view(torch.int32), tensor.view(torch.int32)):
            bad = (ours[name] != tensor).nonzero()[0].tolist()
            sys.exit(f"{name}: element {bad} is {ours[name][tuple(bad)].item()}, "
                     f"not {tensor[tuple(bad)].item()}")
    print(f"PASS: {len(reference)} tensors equal bit for bit")


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"] and len(sys.argv) == 3:
        make(sys.argv[2])
    elif sys.argv[1:2] == ["break"] and len(sys.argv) == 4:
        break_checkpoint(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["shard"] and len(sys.argv) == 3:
        shard(sys.argv[2])
    elif sys.argv[1:2] == ["same"] and len(sys.argv) == 4:
        same(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
