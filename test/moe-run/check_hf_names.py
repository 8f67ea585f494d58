#!/usr/bin/env python3
"""Checks that a moe-run weights file holds exactly the tensors of HF's
MixtralForCausalLM (Llama-style `mlp.*_proj` for dense layers), F32, with
consistent shapes."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
import safetensors_io  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("path")
parser.add_argument("--layers", type=int, required=True)
parser.add_argument("--dense-layers", default="")
parser.add_argument("--experts", type=int, required=True)
args = parser.parse_args()
dense = {int(x) for x in args.dense_layers.split(",") if x}

expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
for i in range(args.layers):
    p = f"model.layers.{i}."
    expected |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
    expected |= {p + f"self_attn.{n}_proj.weight" for n in "qkvo"}
    if i in dense:
        expected |= {p + f"mlp.{n}_proj.weight" for n in ("gate", "up", "down")}
    else:
        expected.add(p + "block_sparse_moe.gate.weight")
        expected |= {p + f"block_sparse_moe.experts.{e}.{w}.weight"
                     for e in range(args.experts) for w in ("w1", "w2", "w3")}

tensors = safetensors_io.load(args.path)
names = set(tensors) - {"__metadata__"}
if names != expected:
    sys.exit(f"missing: {sorted(expected - names)}\nunexpected: {sorted(names - expected)}")
w1 = tensors["model.layers.1.block_sparse_moe.experts.0.w1.weight"]
w2 = tensors["model.layers.1.block_sparse_moe.experts.0.w2.weight"]
if w1.shape[::-1] != w2.shape:
    sys.exit(f"w1 {w1.shape} and w2 {w2.shape} are not transposed shapes")
print(f"{len(names)} tensors with HF Mixtral names")
