#!/usr/bin/env python3
"""Independent PyTorch reference for a moec training step (docs/semantics.md).

This file is written from docs/semantics.md (and, for --precision bf16,
docs/precision.md) alone, not from the C++ sources, so that it is an
independent check of the compiler, kernels and runtime.

Usage (always with Debian's interpreter, which has torch):

  /usr/bin/python3 test/reference/mixtral_reference.py DUMP_DIR [--dtype float64] [--rtol 1e-4] [--failures-only]
      Check a step dump written by `moe-run ... --dump-step DUMP_DIR`.
      Exit status 0 if every check passes, 1 if any fails or the dump cannot be read.

  /usr/bin/python3 test/reference/mixtral_reference.py DUMP_DIR --precision bf16 [--failures-only]
      Check a step dump of a BF16 mixed-precision compile against the recipe of
      docs/precision.md (the default is the dump's config.json "precision",
      a string or {compute, grad_reduce}; fp32 without one): loss, ce and aux
      within 2e-3 relative, every gradient, the global norm and the updated
      parameters within 1e-2 relative norm, the optimizer's fp32 arithmetic on
      the dump's gradients within --rtol (BF16_LOSS_RTOL explains the numbers).
      Router decisions within a few BF16 ulps (near ties) are routed as the
      dump's gradients indicate (resolve_near_ties).

  /usr/bin/python3 test/reference/mixtral_reference.py --self-test [--precision bf16] [--keep DIR]
      (with --precision bf16: bf16_self_test, the recipe's own checks)
      Hand-checkable semantic unit checks, then for several tiny random configs:
      write a dump whose gradients/update are computed in float64 by this
      script, check it with the float32 path (must PASS), and check a dump with
      perturbed gradients (must FAIL).  Exit 0 iff all of that holds.

  /usr/bin/python3 test/reference/mixtral_reference.py --write-self-test-dump DIR [--case NAME] [--seed N] [--perturb-grads]
      Only write such a dump (e.g. to test other tooling); with --perturb-grads
      one gradient tensor is perturbed so that checking DIR must fail.

Step dump layout (see the brief in the repository docs):
  config.json, params.safetensors, batch.safetensors (tokens, targets: I32 [B,S]),
  grads.safetensors, params_after.safetensors, metrics.json
  optional: optim_state.safetensors with "<param>.exp_avg"/"<param>.exp_avg_sq"
  (optimizer state before the step; such keys may also live inside
  params.safetensors).  Without it the state is taken as zero.  State keys found
  in params_after.safetensors / optim_state_after.safetensors are compared too.
"""

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

STATE_SUFFIXES = (".exp_avg_sq", ".exp_avg")  # longest first for suffix matching
TINY = 1e-30  # denominator floor of the relative-norm metric


# ----------------------------------------------------------------------------
# Mixed-precision recipe (docs/precision.md)
#
# With --precision bf16 the model runs on float32 tensors that hold BF16
# values: every tensor the recipe stores in BF16 is rounded to nearest even
# (torch's float32 -> bfloat16 conversion) where the op that produces it ends.
# A product of two BF16 values is exact in float32, so a float32 GEMM of
# BF16-valued operands is exactly "read BF16, accumulate in fp32"; rounding its
# result is "round the output once".  Three roundings, written from the recipe:
#   activation: forward and backward (a BF16 activation has a BF16 gradient);
#   working copy: forward only (the weight gradient stays fp32, the master is fp32);
#   consumer gradient: backward only, where an op hands the gradient of one of
#     its BF16 inputs back (each op's dx is a BF16 tensor before the sum of the
#     contributions of several consumers, which is itself an add rounded once).
# With --precision fp32 all three are the identity and the model is unchanged.
# ----------------------------------------------------------------------------

def bf16_round(x):
    """Round to the nearest BF16 value, ties to even, kept in x's dtype."""
    return x.to(torch.bfloat16).to(x.dtype)


class _RoundActivation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return bf16_round(x)

    @staticmethod
    def backward(ctx, g):
        return bf16_round(g)


class _RoundWorkingCopy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return bf16_round(x)

    @staticmethod
    def backward(ctx, g):
        return g


class _RoundConsumerGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return bf16_round(g)


class _WeightedBf16Row(torch.autograd.Function):
    """w * bf16(z) for an expert's output rows z and their routing weights w
    (bf16 recipe): each assignment's output is rounded to BF16 (the rows an
    expert all-to-all brings back), passing its gradient w dy straight
    through as every rounding here does; the weight's gradient dy . z reads z
    as computed, as the kernel's a . (W2^T dy) does."""

    @staticmethod
    def forward(ctx, z, w):
        ctx.save_for_backward(z, w)
        return bf16_round(z) * w

    @staticmethod
    def backward(ctx, g):
        z, w = ctx.saved_tensors
        return g * w, (g * z).sum(-1, keepdim=True)


class Recipe:
    """The precision the model computes in; set by `use_precision`."""
    bf16 = False


def use_precision(precision):
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"unknown precision '{precision}' (known: fp32, bf16)")
    Recipe.bf16 = precision == "bf16"


def act(x):
    """A BF16 activation (bf16 recipe): the producing op's output, rounded once."""
    return _RoundActivation.apply(x) if Recipe.bf16 else x


def working(w):
    """The BF16 working copy of an fp32 master weight (bf16 recipe)."""
    return _RoundWorkingCopy.apply(w) if Recipe.bf16 else w


def consumer(x):
    """x as an op reads it: that op's contribution to dx is rounded to BF16 (bf16 recipe)."""
    return _RoundConsumerGradient.apply(x) if Recipe.bf16 else x


def linear(layer, x, activation_out=True):
    """y = x W^T.  bf16 recipe: BF16 x and working copy of W, fp32 accumulation,
    output rounded to BF16 unless it stays fp32 (`activation_out=False`, the
    router's logits); dW is fp32, dx BF16."""
    if not Recipe.bf16:
        return layer(x)
    y = F.linear(consumer(x), working(layer.weight))
    return act(y) if activation_out else y


# ----------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------

@dataclasses.dataclass
class OptimConfig:
    lr_peak: float = 3e-4
    lr_min: float = 3e-5
    warmup: int = 100
    decay: int = 1000
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0


@dataclasses.dataclass
class Config:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    experts: int
    top_k: int
    ffn: int
    seq: int
    batch: int
    dense_layers: List[int] = dataclasses.field(default_factory=list)
    dense_ffn: Optional[int] = None  # width of the dense layers' MLP (default: ffn)
    # DeepSeek's n_shared_experts: one always-active MLP of width shared_experts * ffn.
    shared_experts: int = 0
    # Qwen3's head_dim, independent of hidden / heads (0: hidden // heads).
    head_dim: int = 0
    # The router (moe.router): "softmax" or DeepSeek-V3's "sigmoid" scores,
    # top-k renormalisation (HF's norm_topk_prob), routed_scaling_factor and
    # group-limited selection (n_group groups, the top-k among the experts
    # of the best topk_group).
    scoring: str = "softmax"
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0
    n_group: int = 1
    topk_group: int = 1
    # DeepSeek-V3's auxiliary-loss-free balancing: each MoE layer's selection
    # bias (gate.e_score_correction_bias) moves by this rate times the sign
    # of its expert's load error at the end of every step (0: no bias).
    bias_update_rate: float = 0.0
    # DeepSeek-V3's sequence-wise balance loss and ST-MoE's router z-loss:
    # each MoE layer's, times these, summed over the layers.
    seq_aux_coef: float = 0.0
    z_loss_coef: float = 0.0
    # DeepSeek's multi-head latent attention (0: none; q_lora_rank 0: a
    # plain q_proj).
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Qwen3's QK-norm: each head's query and key RMS-normalised (one weight
    # of head_dim each) before RoPE.
    qk_norm: bool = False
    # Which HF checkpoint's parameter names (FAMILY_NAMES); not the math.
    family: str = "mixtral"
    # HF tie_word_embeddings: the LM head is the embedding table.
    tie_word_embeddings: bool = False
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0
    aux_coef: float = 0.01
    capacity_factor: float = 0.0
    optimizer: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    step: int = 0
    # docs/precision.md: "fp32" or "bf16"; the dtype weight gradients are reduced in.
    precision: str = "fp32"
    grad_reduce: str = "fp32"


    @property
    def moe_layers(self):
        return [i for i in range(self.layers) if i not in set(self.dense_layers)]

    @staticmethod
    def from_dict(d):
        d = dict(d)
        opt = d.pop("optimizer", {}) or {}
        # The precision as the module records it ({compute, grad_reduce}) or as flags name it.
        prec = d.get("precision")
        if isinstance(prec, dict):
            d["precision"] = prec.get("compute", "fp32")
            if "grad_reduce" in prec:
                d["grad_reduce"] = prec["grad_reduce"]
        if "grad_reduce_dtype" in d:
            d["grad_reduce"] = d.pop("grad_reduce_dtype")
        fields = {f.name for f in dataclasses.fields(Config)}
        unknown = sorted(set(d) - fields)
        if unknown:
            print(f"note: ignoring unknown config keys {unknown}", file=sys.stderr)
        ofields = {f.name for f in dataclasses.fields(OptimConfig)}
        ounknown = sorted(set(opt) - ofields)
        if ounknown:
            print(f"note: ignoring unknown optimizer keys {ounknown}", file=sys.stderr)
        cfg = Config(**{k: v for k, v in d.items() if k in fields},
                     optimizer=OptimConfig(**{k: v for k, v in opt.items() if k in ofields}))
        cfg.dense_layers = sorted(int(i) for i in cfg.dense_layers)
        cfg.validate()
        return cfg

    def to_dict(self):
        return dataclasses.asdict(self)

    def validate(self):
        def need(cond, msg):
            if not cond:
                raise ValueError(f"bad config: {msg}")
        if self.head_dim == 0:
            need(self.hidden % self.heads == 0, "hidden must be a multiple of heads")
            self.head_dim = self.hidden // self.heads
        need(self.head_dim % 2 == 0, "head dimension must be even (RoPE rotates halves)")
        need(self.heads % self.kv_heads == 0, "heads must be a multiple of kv_heads")
        need(1 <= self.top_k <= self.experts, "need 1 <= top_k <= experts")
        need(self.shared_experts >= 0, "shared_experts must be >= 0")
        need(self.family in FAMILY_NAMES, f"unknown family '{self.family}' (known: {', '.join(FAMILY_NAMES)})")
        need(self.scoring in ("softmax", "sigmoid"), f"unknown scoring '{self.scoring}' (known: softmax, sigmoid)")
        need(self.experts % self.n_group == 0, "n_group must divide experts")
        need(1 <= self.topk_group <= self.n_group, "need 1 <= topk_group <= n_group")
        need(all(0 <= i < self.layers for i in self.dense_layers), "dense_layers out of range")
        need(self.capacity_factor >= 0, "capacity_factor must be >= 0")
        need(self.precision in ("fp32", "bf16"), f"unknown precision '{self.precision}' (known: fp32, bf16)")
        need(self.grad_reduce in ("fp32", "bf16"), f"unknown grad_reduce '{self.grad_reduce}' (known: fp32, bf16)")


# ----------------------------------------------------------------------------
# Model (module names mirror HF MixtralForCausalLM so that named_parameters()
# yields exactly the HF tensor names used in the dumps)
# ----------------------------------------------------------------------------

class RMSNorm(nn.Module):
    """HF MixtralRMSNorm: y = w * x / sqrt(mean(x^2) + eps)."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        if Recipe.bf16:
            # Statistics in fp32 from the BF16 input; the output rounded once.
            x = consumer(x)
            r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
            return act(working(self.weight) * (x * r))
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (x * r)


def rope_tables(seq, d, theta, dtype):
    """cos/sin of angle[p, i] = p * theta^(-2i/d), i < d/2, shape [seq, d/2].

    Computed in float64 and then rounded, so the reference's tables are as
    accurate as the working precision allows."""
    half = d // 2
    inv_freq = float(theta) ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


def apply_rope(x, cos, sin):
    """Rotate-half RoPE on x [..., S, d] with cos/sin [S, d/2] (semantics.md):
        y[i]      = x[i] cos - x[i+half] sin
        y[i+half] = x[i+half] cos + x[i] sin
    The pair (i, i+half) is rotated, not the adjacent pair (2i, 2i+1)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        H, nh, nkv, d = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim
        self.nh, self.nkv, self.d = nh, nkv, d
        self.q_proj = nn.Linear(H, nh * d, bias=False)
        self.k_proj = nn.Linear(H, nkv * d, bias=False)
        self.v_proj = nn.Linear(H, nkv * d, bias=False)
        self.o_proj = nn.Linear(nh * d, H, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_eps)
            self.k_norm = RMSNorm(d, cfg.rms_eps)

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        q = linear(self.q_proj, x).view(B, S, self.nh, self.d)
        k = linear(self.k_proj, x).view(B, S, self.nkv, self.d)
        if hasattr(self, "q_norm"):
            # HF Qwen3Attention: per head, before the transpose and RoPE.
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)                             # [B, n, S, d]
        v = linear(self.v_proj, x).view(B, S, self.nkv, self.d).transpose(1, 2)
        # positions p = s; bf16: the rotated q and k are BF16 (fp32 tables and arithmetic).
        q, k = act(apply_rope(q, cos[:S], sin[:S])), act(apply_rope(k, cos[:S], sin[:S]))
        # GQA (HF repeat_kv): query head h reads kv head h // (nh/nkv);
        # repeat_interleave gives kv heads [0,0,..,1,1,..], i.e. exactly that map.
        rep = self.nh // self.nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.d))
        future = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)  # j > i
        s = s.masked_fill(future, float("-inf"))
        # bf16: scores, softmax (its log-sum-exp) and the PV accumulation in fp32;
        # the output rounded once (its gradient, dq/dk/dv, BF16 through act()).
        o = act(torch.softmax(s, dim=-1) @ v)                                 # [B, nh, S, d]
        return linear(self.o_proj, o.transpose(1, 2).reshape(B, S, self.nh * self.d))


class LatentAttention(nn.Module):
    """HF DeepseekV3Attention (multi-head latent attention, rope_interleave
    off): queries through the optional q_lora_rank bottleneck, keys and
    values from one kv_lora_rank vector per token, one RoPE key shared by
    the heads; scale 1/sqrt(qk_nope_head_dim + qk_rope_head_dim)."""

    def __init__(self, cfg: Config):
        super().__init__()
        H, nh = cfg.hidden, cfg.heads
        self.nh, self.nope, self.rope = nh, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim
        self.dv, self.rank = cfg.v_head_dim, cfg.kv_lora_rank
        qk = self.nope + self.rope
        if cfg.q_lora_rank:
            self.q_a_proj = nn.Linear(H, cfg.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.rms_eps)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, nh * qk, bias=False)
        else:
            self.q_proj = nn.Linear(H, nh * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(H, self.rank + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.rank, cfg.rms_eps)
        self.kv_b_proj = nn.Linear(self.rank, nh * (self.nope + self.dv), bias=False)
        self.o_proj = nn.Linear(nh * self.dv, H, bias=False)

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        if hasattr(self, "q_a_proj"):
            q = linear(self.q_b_proj, self.q_a_layernorm(linear(self.q_a_proj, x)))
        else:
            q = linear(self.q_proj, x)
        q = q.view(B, S, self.nh, self.nope + self.rope).transpose(1, 2)      # [B, n, S, qk]
        q_pass, q_rot = q.split([self.nope, self.rope], dim=-1)
        compressed = linear(self.kv_a_proj_with_mqa, x)
        k_pass, k_rot = compressed.split([self.rank, self.rope], dim=-1)
        kv = linear(self.kv_b_proj, self.kv_a_layernorm(k_pass))
        kv = kv.view(B, S, self.nh, self.nope + self.dv).transpose(1, 2)
        k_pass, v = kv.split([self.nope, self.dv], dim=-1)
        k_rot = k_rot.view(B, 1, S, self.rope)
        q_rot = act(apply_rope(q_rot, cos[:S], sin[:S]))
        k_rot = act(apply_rope(k_rot, cos[:S], sin[:S])).expand(B, self.nh, S, self.rope)
        q = torch.cat([q_pass, q_rot], dim=-1)
        k = torch.cat([k_pass, k_rot], dim=-1)
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.nope + self.rope))
        future = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
        o = act(torch.softmax(s, dim=-1) @ v)                                 # [B, nh, S, dv]
        return linear(self.o_proj, o.transpose(1, 2).reshape(B, S, self.nh * self.dv))


def moe_capacity(cf, T, k, E):
    """C = ceil(cf * T * k / E) (evaluated in double precision)."""
    return int(math.ceil(cf * T * k / E))


def apply_capacity(idx, E, C):
    """Drop assignments beyond an expert's capacity C, slot-major: all tokens'
    first choices in token order, then all second choices, ...  Dropped
    entries of idx become -1.  idx: [T, k] long."""
    T, k = idx.shape
    slot_major = idx.t().reshape(-1)                       # [k*T]: (j=0,t=0..T-1), (j=1,...)
    onehot = F.one_hot(slot_major, E)                      # [k*T, E]
    # Position of each assignment in its expert's queue (0-based).
    rank = (onehot.cumsum(0) * onehot).sum(-1) - 1
    keep = (rank < C).view(k, T).t()
    return torch.where(keep, idx, torch.full_like(idx, -1))


@dataclasses.dataclass
class RoutingRule:
    """The selection rule of moe.router (semantics.md, "Router"); the default
    is HF Mixtral's."""
    scoring: str = "softmax"
    normalize: bool = True
    scale: float = 1.0
    groups: int = 1
    top_groups: int = 1

    @staticmethod
    def of(cfg):
        return RoutingRule(cfg.scoring, cfg.norm_topk_prob, cfg.routed_scaling_factor,
                           cfg.n_group, cfg.topk_group)


def route(logits, top_k, capacity_factor=0.0, forced=None, rule=RoutingRule(), bias=None):
    """Router of semantics.md.  logits: [T, E].  `forced` ({token: [expert ids]})
    replaces the top-k of those tokens (near ties of the bf16 check).

    Returns p [T,E] (the scores: softmax or sigmoid), idx [T,k] (long; -1 =
    dropped by capacity), w [T,k] (the selected scores, renormalised when
    rule.normalize, times rule.scale; a dropped slot keeps its weight), and
    count [E] (top-k selections per expert *before* dropping)."""
    T, E = logits.shape
    p = torch.sigmoid(logits) if rule.scoring == "sigmoid" else torch.softmax(logits, dim=-1)
    choice = p.detach()
    if bias is not None:
        # e_score_correction_bias steers the choice only; w reads p.
        choice = choice + bias.to(choice.dtype)
    if rule.groups > 1:
        # DeepSeek-V3's group-limited routing: a group scores the sum of its
        # two best, and only the best top_groups groups' experts compete.
        G = rule.groups
        grouped = choice.view(T, G, E // G)
        group_score = torch.sort(grouped, dim=-1, descending=True).values[..., :2].sum(-1)
        best = torch.sort(-group_score, dim=-1, stable=True).indices[:, :rule.top_groups]
        keep = torch.zeros(T, G, dtype=torch.bool).scatter_(1, best, True)
        choice = grouped.masked_fill(~keep[..., None], float("-inf")).view(T, E)
    # Top-k with a deterministic tie rule: descending p, equal p -> lower expert
    # id first.  A *stable* ascending sort of -p keeps equal keys in id order;
    # torch.topk gives no such guarantee.
    idx = torch.sort(-choice, dim=-1, stable=True).indices[:, :top_k]
    if forced:
        idx = idx.clone()
        for t, experts in forced.items():
            idx[t] = torch.tensor(experts, dtype=idx.dtype)
    top_p = p.gather(1, idx)
    w = top_p
    if rule.normalize:
        denom = top_p.sum(-1, keepdim=True)
        # HF DeepSeek-V3 adds 1e-20: sigmoid scores may all underflow.
        w = top_p / (denom + 1e-20 if rule.scoring == "sigmoid" else denom)
    w = w * rule.scale
    count = torch.bincount(idx.reshape(-1), minlength=E)
    if capacity_factor > 0:
        idx = apply_capacity(idx, E, moe_capacity(capacity_factor, T, top_k, E))
    return p, idx, w, count


def load_balancing_loss(p, count, T):
    """aux = E * sum_e (count[e]/T) * P[e], P[e] = mean_t p[t,e]; count has no gradient."""
    E = p.shape[-1]
    return E * ((count.to(p.dtype) / T) * p.mean(0)).sum()


def sequence_balance_loss(p, idx, B, S):
    """DeepSeek-V3's sequence-wise balance loss (its paper's eqs. 17-20): the
    mean over the B sequences of sum_e f_e P_e, with f_e = E/(K S) times the
    sequence's assignments to e (the router's admitted ones, idx >= 0) and
    P_e the sequence's mean of the scores normalised per token."""
    E, K = p.shape[-1], idx.shape[-1]
    q = p / (p.sum(-1, keepdim=True) + 1e-20)
    P = q.reshape(B, S, E).mean(1)
    slots = idx.reshape(B, S * K)
    hits = torch.zeros(B, E + 1, dtype=p.dtype).scatter_add_(
        1, torch.where(slots >= 0, slots, E), torch.ones(B, S * K, dtype=p.dtype))[:, :E]
    f = hits * (E / (K * S))
    return (f * P).sum(1).mean()


def router_z_loss(logits):
    """ST-MoE's router z-loss: mean over the tokens of logsumexp(logits)^2."""
    return torch.logsumexp(logits, dim=-1).square().mean()


# HF module names of a family's MoE layers: the block, then its experts'
# gate (silu), up and down projections (include/moe/Dialect/MoE/IR/HfNames.h).
FAMILY_NAMES = {
    "mixtral": ("block_sparse_moe", "w1", "w3", "w2"),
    "qwen3_moe": ("mlp", "gate_proj", "up_proj", "down_proj"),
    "deepseek_v3": ("mlp", "gate_proj", "up_proj", "down_proj"),
}


class ExpertMLP(nn.Module):
    """HF MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x), under the family's
    names (w1, w3, w2 are the gate, up and down projections)."""

    def __init__(self, H, Fdim, family="mixtral"):
        super().__init__()
        _, gate, up, down = FAMILY_NAMES[family]
        self.names = (gate, up, down)
        setattr(self, gate, nn.Linear(H, Fdim, bias=False))
        setattr(self, down, nn.Linear(Fdim, H, bias=False))
        setattr(self, up, nn.Linear(H, Fdim, bias=False))

    def projections(self):
        """The gate, up and down projections (Mixtral's w1, w3, w2)."""
        return tuple(getattr(self, name) for name in self.names)

    def forward(self, x):
        w1, w3, w2 = self.projections()
        if Recipe.bf16:
            # The experts are one op (moe.experts, moe.experts_grad), and a kernel
            # "decodes its BF16 operands exactly to fp32, computes in fp32 and
            # rounds each BF16 result once" (docs/precision.md): u, g and
            # silu(u)*g stay fp32 inside it; each assignment's output and input
            # gradient are rounded to BF16 (SparseMoeBlock), and so are the
            # op's y and dx once their assignments are added; dW1, dW2, dW3 fp32.
            w1, w3, w2 = (working(lin.weight) for lin in (w1, w3, w2))
            return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)
        return w2(F.silu(w1(x)) * w3(x))


class SparseMoeBlock(nn.Module):
    """HF MixtralSparseMoeBlock (+ optional capacity factor).

    Eager implementation as in HF: group the (token, slot) assignments by
    expert, run each expert on its gathered tokens, scale by the routing
    weight and index_add_ back.  Used both by the reference and the benchmark."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.E, self.k, self.cf = cfg.experts, cfg.top_k, cfg.capacity_factor
        self.rule = RoutingRule.of(cfg)
        # moe.aux_loss recounts the top-k of the scores: only a softmax router
        # over one group has it (the others need aux_coef = 0).
        self.has_aux = cfg.scoring == "softmax" and cfg.n_group == 1 and cfg.bias_update_rate == 0
        self.seq_aux, self.z_loss = cfg.seq_aux_coef > 0, cfg.z_loss_coef > 0
        # The selection bias (set from the dump's state) and this step's
        # load: the assignments admitted per expert.
        self.score_bias = None
        self.load = torch.zeros(cfg.experts, dtype=torch.float64)
        self.gate = nn.Linear(cfg.hidden, cfg.experts, bias=False)
        self.experts = nn.ModuleList(ExpertMLP(cfg.hidden, cfg.ffn, cfg.family)
                                     for _ in range(cfg.experts))
        # DeepseekV3MoE's shared_experts: their outputs added to the routed ones.
        if cfg.shared_experts > 0:
            self.shared_experts = DenseMLP(cfg.hidden, cfg.shared_experts * cfg.ffn)
        # {token: expert ids} overriding the router's top-k (near ties, see resolve_near_ties).
        self.forced = None

    def forward(self, x, stats=None):
        shape = x.shape
        xt = x.reshape(-1, shape[-1])
        T = xt.shape[0]
        # bf16: the gate GEMM's output (the router logits) stays fp32, and so do
        # softmax, top-k, the routing weights and their gradients.
        logits = linear(self.gate, xt, activation_out=False)
        p, idx, w, count = route(logits, self.k, self.cf, self.forced, self.rule, self.score_bias)
        admitted = idx.reshape(-1)
        self.load = self.load + torch.bincount(admitted[admitted >= 0], minlength=self.E).double()
        losses = {}
        if self.has_aux:
            losses["aux"] = load_balancing_loss(p, count, T)
        if self.seq_aux:
            losses["seq_aux"] = sequence_balance_loss(p, idx, shape[0], shape[1])
        if self.z_loss:
            losses["z_loss"] = router_z_loss(logits)
        if stats is not None:
            stats.append(router_stats(p, idx, count, self.k, logits, xt, self.gate.weight))
        xe = consumer(xt)  # the experts' dx: one BF16 contribution per token

        flat_e = idx.reshape(-1)                           # assignment a = t*k + j
        live = (flat_e >= 0).nonzero().squeeze(1)          # dropped slots contribute nothing
        order = live[torch.sort(flat_e[live], stable=True).indices]  # grouped by expert
        sizes = torch.bincount(flat_e[live], minlength=self.E).tolist()
        tok = torch.div(order, self.k, rounding_mode="floor")
        wt = w.reshape(-1)[order]
        y = torch.zeros_like(xt)
        start = 0
        for e, n in enumerate(sizes):
            if n == 0:
                continue
            sl = slice(start, start + n)
            start += n
            t_e = tok[sl]
            if Recipe.bf16:
                # docs/precision.md, Experts: each assignment's row in BF16.
                z = self.experts[e](consumer(xe[t_e]))
                y.index_add_(0, t_e, _WeightedBf16Row.apply(z, wt[sl, None]))
            else:
                y.index_add_(0, t_e, self.experts[e](xe[t_e]) * wt[sl, None])
        # bf16: the weighted sum over a token's experts in fp32, rounded once.
        y = act(y)
        if hasattr(self, "shared_experts"):
            y = act(y + self.shared_experts(xt)[0])
        return y.view(shape), losses


def router_stats(p, idx, count, k, logits=None, x=None, w_gate=None):
    """Diagnostics: min gap between the k-th and (k+1)-th probability (a tiny gap
    means float rounding may legitimately flip a routing decision).

    bf16 recipe (logits, x, w_gate given): the tokens whose choice between the
    k-th and (k+1)-th expert could flip between two correct implementations,
    as `near_ties`: (gap, token, top-k ids, the ids with the two swapped)."""
    s = torch.sort(p.detach(), dim=-1, descending=True).values
    gap = float((s[:, k - 1] - s[:, k]).min()) if k < p.shape[-1] else float("inf")
    out = {"min_topk_gap": gap, "dropped": int((idx < 0).sum()), "count": count.tolist(), "near_ties": []}
    if Recipe.bf16 and k < p.shape[-1]:
        out["near_ties"] = bf16_near_ties(p, k, logits.detach(), x.detach(), working(w_gate).detach())
    return out


# A routing decision is a near tie when the logit gap between the k-th and the
# (k+1)-th expert could be closed by NEAR_TIE_ULPS one-ulp differences of the
# BF16 router input x (two correct runs round an element of x differently when
# their fp32 values, summed in different orders, straddle a rounding boundary):
# one such difference in x[j] moves logit e by at most 2^-8 |x[j] W[e, j]|.
NEAR_TIE_ULPS = 8
MAX_NEAR_TIES = 64  # per layer, the closest first; a bound on the resolution's cost


def bf16_near_ties(p, k, logits, x, w_gate):
    order = torch.sort(-p.detach(), dim=-1, stable=True).indices
    ek, ek1 = order[:, k - 1], order[:, k]
    lk, lk1 = logits.gather(1, ek[:, None])[:, 0], logits.gather(1, ek1[:, None])[:, 0]
    term = lambda e: (x * w_gate[e]).abs().max(-1).values  # noqa: E731
    tau = NEAR_TIE_ULPS * 2.0 ** -8 * torch.maximum(term(ek), term(ek1))
    gap = lk - lk1
    ties = []
    for t in (gap <= tau).nonzero()[:, 0].tolist():
        top = order[t, :k].tolist()
        swapped = top[:-1] + [int(ek1[t])]
        ties.append((float(gap[t]), t, top, swapped))
    return sorted(ties)[:MAX_NEAR_TIES]


class DenseMLP(nn.Module):
    """Dense SwiGLU (Llama naming): down(silu(gate x) * up x)."""

    def __init__(self, H, Fdim):
        super().__init__()
        self.gate_proj = nn.Linear(H, Fdim, bias=False)
        self.up_proj = nn.Linear(H, Fdim, bias=False)
        self.down_proj = nn.Linear(Fdim, H, bias=False)

    def forward(self, x, stats=None):
        if Recipe.bf16:
            return linear(self.down_proj, act(F.silu(linear(self.gate_proj, x)) * linear(self.up_proj, x))), {}
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)), {}


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Config, dense: bool):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.rms_eps)
        self.self_attn = LatentAttention(cfg) if cfg.kv_lora_rank else Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.rms_eps)
        self.moe_name = FAMILY_NAMES[cfg.family][0]
        if dense:
            self.mlp = DenseMLP(cfg.hidden, cfg.dense_ffn or cfg.ffn)
        else:
            setattr(self, self.moe_name, SparseMoeBlock(cfg))
        self.dense = dense

    @property
    def moe(self):
        """The MoE block, under its family's name."""
        return getattr(self, self.moe_name)

    def forward(self, x, cos, sin, stats=None):
        a = act(x + self.self_attn(self.input_layernorm(x), cos, sin))  # bf16: the residual stream
        ffn = self.mlp if self.dense else self.moe
        y, losses = ffn(self.post_attention_layernorm(a), stats)
        return act(a + y), losses


class MixtralModel(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        dense = set(cfg.dense_layers)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i in dense) for i in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.rms_eps)


def cross_entropy(logits, targets):
    """Mean over targets >= 0 of logsumexp(logits) - logits[target]; 0 if none."""
    V = logits.shape[-1]
    valid = targets >= 0
    n = int(valid.sum())
    if n == 0:
        return logits.sum() * 0.0  # keeps the graph: all-zero gradients
    lv, tv = logits[valid], targets[valid]
    if int(tv.max()) >= V:
        raise ValueError(f"target id {int(tv.max())} >= vocab {V}")
    return (torch.logsumexp(lv, dim=-1) - lv.gather(1, tv[:, None]).squeeze(1)).sum() / n


class MixtralForCausalLM(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.model = MixtralModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)  # untied, as in Mixtral
        if cfg.tie_word_embeddings:
            # HF's tying: one parameter, named once (model.embed_tokens.weight).
            self.lm_head.weight = self.model.embed_tokens.weight
        self._rope = {}

    def rope(self):
        """(cos, sin) tables [seq, d/2] in the working dtype, cached."""
        w = self.lm_head.weight
        key = (w.dtype, w.device)
        if key not in self._rope:
            # MLA rotates only each head's qk_rope_head_dim features.
            d = self.cfg.qk_rope_head_dim if self.cfg.kv_lora_rank else self.cfg.head_dim
            cos, sin = rope_tables(self.cfg.seq, d, self.cfg.rope_theta, w.dtype)
            self._rope[key] = (cos.to(w.device), sin.to(w.device))
        return self._rope[key]

    def forward(self, tokens, targets, stats=None):
        """tokens, targets: long [B, S].  Returns dict(loss, ce, aux, aux_layers)."""
        cfg = self.cfg
        bad = ((tokens < 0) | (tokens >= cfg.vocab)).nonzero()
        if bad.numel():
            b, s = bad[0].tolist()
            raise ValueError(f"token id {int(tokens[b, s])} at position (batch {b}, seq {s}) "
                             f"outside [0, {cfg.vocab})")
        if tokens.shape[1] > cfg.seq:
            raise ValueError(f"sequence length {tokens.shape[1]} > configured seq {cfg.seq}")
        cos, sin = self.rope()
        if Recipe.bf16:
            h = act(F.embedding(tokens, working(self.model.embed_tokens.weight)))
        else:
            h = self.model.embed_tokens(tokens)
        auxes, seq_auxes, z_losses = [], [], []
        for layer in self.model.layers:
            h, losses = layer(h, cos, sin, stats)
            if "aux" in losses:
                auxes.append(losses["aux"])
            if "seq_aux" in losses:
                seq_auxes.append(losses["seq_aux"])
            if "z_loss" in losses:
                z_losses.append(losses["z_loss"])
        # bf16: BF16 logits; the cross-entropy, the aux losses and their sum in fp32.
        logits = linear(self.lm_head, self.model.norm(h))
        ce = cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))
        # Per-layer load-balancing losses averaged over MoE layers (Megatron-style).
        aux = torch.stack(auxes).mean() if auxes else ce.new_zeros(())
        loss = ce + cfg.aux_coef * aux
        # The sequence-wise and z losses per layer, summed over the layers
        # (as DeepSeek and Megatron-Core apply them); reported as means.
        out = {"ce": ce, "aux": aux, "aux_layers": auxes}
        for key, terms, coef in (("seq_aux", seq_auxes, cfg.seq_aux_coef),
                                 ("z_loss", z_losses, cfg.z_loss_coef)):
            if terms:
                total = torch.stack(terms).sum()
                loss = loss + coef * total
                out[key] = total / len(terms)
        out["loss"] = loss
        return out


def init_params(model: MixtralForCausalLM, seed: int, std=0.02, norm_jitter=0.0):
    """normal(0, std) for linear/embedding weights, 1 (+ optional jitter) for norms.
    Values are drawn in float32 then cast, so float32/float64 copies agree."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_norm(name):
                v = 1.0 + norm_jitter * torch.randn(p.shape, generator=g)
            else:
                v = std * torch.randn(p.shape, generator=g)
            p.copy_(v.float().to(p.dtype))


# ----------------------------------------------------------------------------
# Optimizer step: clipping, LR schedule, AdamW (semantics.md "Optimizer step")
# ----------------------------------------------------------------------------

def is_norm(name):
    return ("layernorm" in name or "model.norm" in name
            or name.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")))


def is_decayed(name):
    return not is_norm(name)


def lr_at(step, o: OptimConfig):
    """Megatron warmup + cosine, 0-based step."""
    if step < o.warmup:
        return o.lr_peak * (step + 1) / o.warmup
    if step < o.decay:
        frac = (step - o.warmup) / (o.decay - o.warmup)
        return o.lr_min + (o.lr_peak - o.lr_min) * 0.5 * (1.0 + math.cos(math.pi * frac))
    return o.lr_min


def global_grad_norm(grads: Dict[str, torch.Tensor]):
    return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))


def clip_coefficient(norm, max_norm):
    """torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)); max_norm <= 0 disables."""
    if max_norm <= 0:
        return 1.0
    return min(1.0, max_norm / (norm + 1e-6))


def adamw_step(params, grads, state, o: OptimConfig, step):
    """One step of clip + schedule + AdamW, computed in float64.

    params, grads: name -> tensor; state: name -> (exp_avg, exp_avg_sq) or
    missing (zero).  Returns (new_params, new_state, info)."""
    norm = global_grad_norm(grads)
    c = clip_coefficient(norm, o.max_grad_norm)
    lr = lr_at(step, o)
    t = step + 1
    bc1, bc2 = 1.0 - o.beta1 ** t, 1.0 - o.beta2 ** t
    new_p, new_s = {}, {}
    for name, p in params.items():
        p = p.double()
        g = grads[name].double() * c
        m0, v0 = state.get(name, (None, None))
        m0 = torch.zeros_like(p) if m0 is None else m0.double()
        v0 = torch.zeros_like(p) if v0 is None else v0.double()
        if is_decayed(name):
            p = p - lr * o.weight_decay * p          # decoupled weight decay, before the Adam update
        m = o.beta1 * m0 + (1.0 - o.beta1) * g
        v = o.beta2 * v0 + (1.0 - o.beta2) * g * g
        p = p - lr * (m / bc1) / (torch.sqrt(v / bc2) + o.eps)
        new_p[name], new_s[name] = p, (m, v)
    return new_p, new_s, {"lr": lr, "grad_norm": norm, "clip_coef": c}


# ----------------------------------------------------------------------------
# Forward/backward on named tensors
# ----------------------------------------------------------------------------

def build_model(cfg, params: Dict[str, np.ndarray], dtype):
    model = MixtralForCausalLM(cfg).to(dtype)
    expected = dict(model.named_parameters())
    missing = sorted(set(expected) - set(params))
    extra = sorted(set(params) - set(expected))
    if missing or extra:
        raise ValueError(f"parameter names differ from the model: missing {missing[:8]}"
                         f"{'...' if len(missing) > 8 else ''}, unexpected {extra[:8]}"
                         f"{'...' if len(extra) > 8 else ''}")
    with torch.no_grad():
        for name, p in expected.items():
            a = params[name]
            if tuple(a.shape) != tuple(p.shape):
                raise ValueError(f"{name}: shape {tuple(a.shape)}, expected {tuple(p.shape)}")
            p.copy_(torch.from_numpy(np.asarray(a)).to(dtype))
    return model


def forward_backward(model, tokens, targets, collect_stats=True):
    """Returns (metrics dict of floats, grads name -> tensor, router stats)."""
    model.zero_grad(set_to_none=True)
    stats = [] if collect_stats else None
    out = model(tokens, targets, stats)
    out["loss"].backward()
    grads = {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
             for n, p in model.named_parameters()}
    m = {k: float(out[k]) for k in ("loss", "ce", "aux", "seq_aux", "z_loss") if k in out}
    m["aux_layers"] = [float(a) for a in out["aux_layers"]]
    return m, grads, stats


# ----------------------------------------------------------------------------
# Dump checker
# ----------------------------------------------------------------------------

def split_state(tensors):
    """Separate "<param>.exp_avg(_sq)" optimizer-state keys from parameters."""
    params, state = {}, {}
    for k, v in tensors.items():
        for suf in STATE_SUFFIXES:
            if k.endswith(suf):
                state.setdefault(k[: -len(suf)], {})[suf] = v
                break
        else:
            params[k] = v
    return params, state


def rel_norm(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), TINY))


def max_abs(a, b):
    d = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return float(d.max()) if d.size else 0.0


class Report:
    def __init__(self, failures_only=False):
        self.rows, self.failures_only = [], failures_only

    def add(self, kind, name, got, ref, rtol, shape="", ok=None, extra=""):
        """One row: relative(-norm) error of got vs ref; `ok` overrides the rtol test."""
        if np.ndim(ref) == 0 and np.ndim(got) == 0:
            g, r = float(got), float(ref)
            err = abs(g - r) / max(abs(r), TINY) if g != r else 0.0
            mabs = abs(g - r)
        else:
            err, mabs = rel_norm(got, ref), max_abs(got, ref)
        ok = (err <= rtol) if ok is None else ok
        self.rows.append((kind, name, shape, err, mabs, ok, extra))
        return ok

    def fail_row(self, kind, name, msg):
        self.rows.append((kind, name, "", float("nan"), float("nan"), False, msg))

    def print(self):
        w = max([len(r[1]) for r in self.rows] + [20])
        print(f"{'check':<10} {'tensor / value':<{w}} {'shape':<16} {'rel_err':>10} {'max_abs':>10}  status")
        print("-" * (w + 58))
        for kind, name, shape, err, mabs, ok, extra in self.rows:
            if self.failures_only and ok:
                continue
            print(f"{kind:<10} {name:<{w}} {shape:<16} {err:>10.3e} {mabs:>10.3e}  "
                  f"{'ok' if ok else 'FAIL'}{'  ' + extra if extra else ''}")

    def failures(self):
        return [f"{r[0]}:{r[1]}" for r in self.rows if not r[5]]


def shape_str(a):
    return "x".join(map(str, np.shape(a))) or "scalar"


def load_dump(d):
    def js(name):
        with open(os.path.join(d, name)) as f:
            return json.load(f)

    def stf(name, required=True):
        path = os.path.join(d, name)
        if not os.path.exists(path):
            if required:
                raise FileNotFoundError(f"{path} missing")
            return {}
        return safetensors_io.load(path)

    cfg = Config.from_dict(js("config.json"))
    params, state0 = split_state(stf("params.safetensors"))
    # Router state (selection biases, load counters) sits with the moments.
    router0, moments0 = split_state(stf("optim_state.safetensors", required=False))
    for k, v in moments0.items():
        state0.setdefault(k, {}).update(v)
    after, state1 = split_state(stf("params_after.safetensors"))
    router1, moments1 = split_state(stf("optim_state_after.safetensors", required=False))
    for k, v in moments1.items():
        state1.setdefault(k, {}).update(v)
    grads, _ = split_state(stf("grads.safetensors"))
    batch = stf("batch.safetensors")
    return dict(cfg=cfg, params=params, state0=state0, after=after, state1=state1,
                grads=grads, batch=batch, metrics=js("metrics.json"),
                router0=router0, router1=router1)


def f32_ulp(x):
    return np.spacing(np.abs(np.asarray(x, np.float32))).astype(np.float64)


# Tolerances of the bf16 check, derived from BF16's unit roundoff u = 2^-9
# (8 significant bits: a rounding to nearest errs by at most 2^-9 relative).
# Two correct implementations of the recipe round the same tensors, but not
# always the same fp32 values: their fp32 sums run in different orders, so
# now and then an element lands on the other side of a BF16 rounding boundary
# (an error of one ulp, 2u), and that difference propagates.  Gradients pass
# through about ten BF16 roundings per layer forward and back; with
# independent errors of at most u per rounding their norm-wise relative
# difference stays at a few u.  So:
#   loss, ce, aux: 2e-3 (~ u): an fp32 mean over all tokens of fp32 values
#     computed from BF16 logits; the per-token differences average out, so a
#     correct implementation is well within one BF16 rounding of the loss;
#   gradients (relative norm per tensor), the global norm and the updated
#     parameters end to end: 1e-2 (~ 5u), a per-tensor norm-wise bound;
#   the optimizer's own fp32 arithmetic on the dump's gradients (lr, the
#     update, the moments): the fp32 tolerance (--rtol, 1e-4), as it runs in fp32.
BF16_LOSS_RTOL = 2e-3
BF16_GRAD_RTOL = 1e-2
WORKING_COPY_SUFFIX = ".bf16"  # docs/precision.md: W.bf16, the working copy of W


LAST_REPORT = []  # the rows of the last check_dump, for the self-test


def split_working_copies(tensors):
    """Separate "<param>.bf16" working copies (if a dump holds them) from parameters."""
    params, copies = {}, {}
    for k, v in tensors.items():
        base = k[: -len(WORKING_COPY_SUFFIX)]
        if k.endswith(WORKING_COPY_SUFFIX) and base in tensors:
            copies[base] = v
        else:
            params[k] = v
    return params, copies


def check_dump(d, dtype=torch.float32, rtol=1e-4, ulp_tol=4.0, failures_only=False, precision=None,
               grad_reduce=None):
    """Check a step dump; prints a report and returns True iff everything passes.

    precision: "fp32" or "bf16" (docs/precision.md); None: the dump's config
    (fp32 when it names none)."""
    dump = load_dump(d)
    cfg = dump["cfg"]
    precision = precision or cfg.precision
    cfg.grad_reduce = grad_reduce or cfg.grad_reduce
    if precision == "bf16" and dtype != torch.float32:
        raise ValueError("the bf16 recipe accumulates in float32: use --dtype float32 with it")
    use_precision(precision)
    try:
        return _check_dump(d, dump, dtype, rtol, ulp_tol, failures_only, precision)
    finally:
        use_precision("fp32")


def _check_dump(d, dump, dtype, rtol, ulp_tol, failures_only, precision):
    cfg, grads = dump["cfg"], dump["grads"]
    params, copies = split_working_copies(dump["params"])
    after, copies_after = split_working_copies(dump["after"])
    bf16 = precision == "bf16"
    loss_rtol, grad_rtol = (BF16_LOSS_RTOL, BF16_GRAD_RTOL) if bf16 else (rtol, rtol)
    o = cfg.optimizer
    rep = Report(failures_only)
    print(f"dump: {d}")
    print(f"config: V={cfg.vocab} H={cfg.hidden} L={cfg.layers} nh={cfg.heads} nkv={cfg.kv_heads} "
          f"E={cfg.experts} k={cfg.top_k} F={cfg.ffn} dense={cfg.dense_layers} B={cfg.batch} "
          f"S={cfg.seq} cf={cfg.capacity_factor} step={cfg.step}; reference dtype {str(dtype)[6:]}, "
          f"precision {precision}" + (f" (dump: {cfg.precision})" if precision != cfg.precision else "") +
          (f", grad_reduce {cfg.grad_reduce}" if bf16 else ""))
    # Working copies in the dump are the masters rounded to nearest even, exactly.
    for label, copy_set, masters in (("params", copies, params), ("params_after", copies_after, after)):
        for n, c in sorted(copy_set.items()):
            want = bf16_round(torch.from_numpy(np.asarray(masters[n], np.float32))).numpy()
            rep.add("working", f"{n}{WORKING_COPY_SUFFIX} ({label})", c, want, 0.0, shape_str(c),
                    ok=bool(np.array_equal(np.asarray(c, np.float32), want)))

    # Structural checks: every parameter has a gradient and an updated value.
    names = list(params)
    for label, other in (("grads", grads), ("params_after", after)):
        for n in sorted(set(names) - set(other)):
            rep.fail_row("missing", n, f"not in {label}.safetensors")
        for n in sorted(set(other) - set(names)):
            rep.fail_row("extra", n, f"in {label}.safetensors but not a parameter")
        for n in sorted(set(names) & set(other)):
            if np.shape(other[n]) != np.shape(params[n]):
                rep.fail_row("shape", n, f"{label} has {np.shape(other[n])}, param {np.shape(params[n])}")

    tokens = torch.from_numpy(np.asarray(dump["batch"]["tokens"])).long()
    targets = torch.from_numpy(np.asarray(dump["batch"]["targets"])).long()
    if tuple(tokens.shape) != (cfg.batch, cfg.seq) or tokens.shape != targets.shape:
        raise ValueError(f"batch tokens {tuple(tokens.shape)} / targets {tuple(targets.shape)} "
                         f"!= [batch, seq] = [{cfg.batch}, {cfg.seq}]")

    # 1) Reference forward/backward.
    model = build_model(cfg, params, dtype)
    moe_blocks = [model.model.layers[i].moe for i in cfg.moe_layers]
    block_prefix = {i: f"model.layers.{i}.{FAMILY_NAMES[cfg.family][0]}.gate." for i in cfg.moe_layers}
    if cfg.bias_update_rate > 0:
        for i, blk in zip(cfg.moe_layers, moe_blocks):
            name = block_prefix[i] + "e_score_correction_bias"
            if name not in dump["router0"]:
                rep.fail_row("missing", name, "not in optim_state.safetensors")
                continue
            blk.score_bias = torch.from_numpy(np.asarray(dump["router0"][name], np.float32))

    def evaluate(forced):
        for blk, f in zip(moe_blocks, forced):
            blk.forced = f or None
            blk.load = torch.zeros_like(blk.load)
        m, g, st = forward_backward(model, tokens, targets)
        g = {n: bf16_round(v) if bf16 and cfg.grad_reduce == "bf16" else v for n, v in g.items()}
        return m, {n: v.double().numpy() for n, v in g.items()}, st

    forced = [{} for _ in moe_blocks]
    ref_m, ref_g, stats = evaluate(forced)
    # This step's load of each router (the last evaluation's).
    loads = {i: blk.load.clone() for i, blk in zip(cfg.moe_layers, moe_blocks)}
    if bf16:
        ref_m, ref_g, forced = resolve_near_ties(evaluate, ref_m, ref_g, stats, forced, dump,
                                                 loss_rtol, grad_rtol)

    # 2) End-to-end reference optimizer step from the reference gradients.
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    state0 = {n: (t(s[".exp_avg"]) if ".exp_avg" in s else None,
                  t(s[".exp_avg_sq"]) if ".exp_avg_sq" in s else None)
              for n, s in dump["state0"].items()}
    if cfg.step > 0 and not state0:
        print(f"note: step {cfg.step} > 0 but no optimizer state in the dump; assuming zero state")
    p64 = {n: t(params[n]) for n in names}
    ref_after, _, ref_info = adamw_step(p64, {n: t(ref_g[n]) for n in names}, state0, o, cfg.step)

    # 3) The optimizer in isolation: the same step from the dump's own gradients,
    #    so an optimizer bug is separated from a gradient bug.
    have_all = all(n in grads for n in names)
    if have_all:
        iso_after, iso_state, iso_info = adamw_step(p64, {n: t(grads[n]) for n in names}, state0, o, cfg.step)

    # ---- scalars
    met = dump["metrics"]
    router_losses = [(key, ref_m[key]) for key in ("seq_aux", "z_loss") if key in ref_m]
    for key, ref in [("loss", ref_m["loss"]), ("ce", ref_m["ce"]), ("aux", ref_m["aux"])] + \
            router_losses + [("grad_norm", ref_info["grad_norm"]), ("lr", ref_info["lr"])]:
        if key not in met:
            rep.fail_row("metric", key, "missing from metrics.json")
            continue
        tol = loss_rtol if key in ("loss", "ce", "aux", "seq_aux", "z_loss") \
            else grad_rtol if key == "grad_norm" else rtol
        ok = rep.add("metric", key, met[key], ref, tol)
        if not ok and key == "aux" and cfg.aux_coef and \
                abs(met[key] - cfg.aux_coef * ref) <= rtol * abs(cfg.aux_coef * ref):
            rep.rows[-1] = rep.rows[-1][:6] + ("(matches aux_coef * aux: dump reports the scaled term?)",)
    if have_all and "grad_norm" in met:
        rep.add("metric", "grad_norm(dump grads)", met["grad_norm"], iso_info["grad_norm"], rtol,
                extra="consistency of metrics.json with grads.safetensors")

    # ---- gradients
    for n in names:
        if n in grads and np.shape(grads[n]) == np.shape(params[n]):
            rep.add("grad", n, grads[n], ref_g[n], grad_rtol, shape_str(params[n]))

    # ---- updated parameters, end to end (reference grads -> reference step)
    for n in names:
        if n in after and np.shape(after[n]) == np.shape(params[n]):
            rep.add("param", n, after[n], ref_after[n].numpy(), grad_rtol, shape_str(params[n]))

    # ---- the update alone, from the dump's grads: relative-norm error of the
    # step (after - before).  The step can be smaller than float32's resolution
    # of the parameter (tiny warmup lr), so an element also passes when it is
    # within `ulp_tol` float32 ulps of the reference (+ rtol of its step).
    if have_all:
        for n in names:
            if n not in after or np.shape(after[n]) != np.shape(params[n]):
                continue
            before = np.asarray(params[n], np.float64)
            ref_new = iso_after[n].numpy()
            got_new = np.asarray(after[n], np.float64)
            err = rel_norm(got_new - before, ref_new - before)
            diff = np.abs(got_new - ref_new)
            bound = ulp_tol * f32_ulp(ref_new) + rtol * np.abs(ref_new - before)
            ok = err <= rtol or bool(np.all(diff <= bound))
            ulps = float((diff / np.maximum(f32_ulp(ref_new), TINY)).max()) if diff.size else 0.0
            rep.add("update", n, got_new - before, ref_new - before, rtol, shape_str(params[n]),
                    ok=ok, extra=f"max {ulps:.1f} ulp" if not ok or err > rtol else "")
        # Optimizer state after the step, if the dump has it.
        for n, s in sorted(dump["state1"].items()):
            if n not in iso_state:
                rep.fail_row("state", n, "state for an unknown parameter")
                continue
            for suf, ref in ((".exp_avg", iso_state[n][0]), (".exp_avg_sq", iso_state[n][1])):
                if suf in s:
                    rep.add("state", n + suf, s[suf], ref.numpy(), rtol, shape_str(s[suf]))

    # ---- router state: the bias moved by rate * sign(mean load - load), the
    # load counters cleared (the counter before the step is all zeros).
    for i in cfg.moe_layers:
        counter = block_prefix[i] + "tokens_per_expert"
        if counter in dump["router1"]:
            rep.add("router", counter, dump["router1"][counter], np.zeros(cfg.experts), 0.0,
                    shape_str(dump["router1"][counter]))
        name = block_prefix[i] + "e_score_correction_bias"
        if cfg.bias_update_rate > 0 and name in dump["router0"]:
            load = loads[i].numpy()
            want = (np.asarray(dump["router0"][name], np.float64) +
                    cfg.bias_update_rate * np.sign(load.mean() - load)).astype(np.float32)
            got = dump["router1"].get(name)
            if got is None:
                rep.fail_row("missing", name, "not in optim_state_after.safetensors")
            else:
                rep.add("router", name, got, want, rtol, shape_str(got),
                        extra=f"load {load.astype(int).tolist()}")

    rep.print()
    LAST_REPORT[:] = rep.rows
    for i, st, f in zip(cfg.moe_layers, stats, forced):
        warn = "  <-- near tie: routing may legitimately differ" if st["min_topk_gap"] < 1e-5 and not bf16 else ""
        ties = (f", {len(st['near_ties'])} near ties, {len(f)} routed the other way to match the dump"
                if bf16 else "")
        print(f"router layer {i}: tokens/expert {st['count']}, dropped {st['dropped']}, "
              f"min top-k prob gap {st['min_topk_gap']:.2e}{ties}{warn}")
    print(f"reference: loss {ref_m['loss']:.8g} ce {ref_m['ce']:.8g} aux {ref_m['aux']:.8g} "
          f"grad_norm {ref_info['grad_norm']:.8g} lr {ref_info['lr']:.8g} clip_coef {ref_info['clip_coef']:.8g}")
    fails = rep.failures()
    if fails:
        shown = ", ".join(fails[:20]) + (f", ... ({len(fails) - 20} more)" if len(fails) > 20 else "")
        print(f"FAIL: {len(fails)} of {len(rep.rows)} checks failed: {shown}")
        return False
    if bf16:
        print(f"PASS: all {len(rep.rows)} checks within the bf16 tolerances (loss {loss_rtol:g}, "
              f"gradients {grad_rtol:g}, optimizer {rtol:g})")
    else:
        print(f"PASS: all {len(rep.rows)} checks within rtol {rtol:g}")
    return True


def bf16_score(ref_m, ref_g, dump, loss_rtol, grad_rtol):
    """How far the dump is from a reference evaluation, in units of the tolerances
    (the sum of squares, so that fixing one tensor counts even if another is off)."""
    score = 0.0
    for key in ("loss", "ce", "aux"):
        if key in dump["metrics"]:
            r = ref_m[key]
            score += (abs(dump["metrics"][key] - r) / max(abs(r), TINY) / loss_rtol) ** 2
    for n, g in dump["grads"].items():
        if n in ref_g and np.shape(g) == np.shape(ref_g[n]):
            score += (rel_norm(g, ref_g[n]) / grad_rtol) ** 2
    return score


def resolve_near_ties(evaluate, ref_m, ref_g, stats, forced, dump, loss_rtol, grad_rtol):
    """Near ties of the bf16 router (router_stats): two correct implementations
    may route such a token differently, and one token moved to another expert
    changes that expert's gradient by about 1/(its tokens), more than the
    tolerance allows for a few tokens.  The dump does not record its routing, so
    its gradients tell: greedily, closest tie first, route a tied token to its
    (k+1)-th expert instead when that brings the reference closer to the dump.
    Only near ties can move, so a wrong routing of any other token, or any
    other error, still fails."""
    ties = sorted((gap, layer, t, swapped) for layer, st in enumerate(stats)
                  for gap, t, _, swapped in st["near_ties"])
    if not ties:
        return ref_m, ref_g, forced
    best = bf16_score(ref_m, ref_g, dump, loss_rtol, grad_rtol)
    if best <= 1.0:  # already within every tolerance (the sum of squares bounds the max)
        return ref_m, ref_g, forced
    for _, layer, t, swapped in ties:
        trial = [dict(f) for f in forced]
        trial[layer][t] = swapped
        m, g, _ = evaluate(trial)
        score = bf16_score(m, g, dump, loss_rtol, grad_rtol)
        if score < best:
            best, forced, ref_m, ref_g = score, trial, m, g
    evaluate(forced)  # leave the model routed as reported
    return ref_m, ref_g, forced


# ----------------------------------------------------------------------------
# Self-test: dumps written by this script in float64
# ----------------------------------------------------------------------------

def _cfg(**kw):
    opt = kw.pop("optimizer", {})
    return Config(**kw, optimizer=OptimConfig(**opt))


SELF_TEST_CASES = {
    # GQA (2 query heads per kv head), a dense first layer, top-2 of 4, warmup lr, clipping active.
    "gqa_dense": dict(cfg=_cfg(vocab=64, hidden=32, layers=3, heads=4, kv_heads=2, experts=4, top_k=2,
                               ffn=24, dense_layers=[0], seq=12, batch=2, aux_coef=0.02, step=1,
                               optimizer=dict(lr_peak=1e-3, lr_min=1e-4, warmup=4, decay=20)),
                      std=0.1, clip_ratio=0.5, state=False),
    # MQA, top-2 of 8 with capacity factor 1.0 (tokens get dropped), cosine lr, non-zero Adam state.
    "capacity": dict(cfg=_cfg(vocab=48, hidden=32, layers=2, heads=4, kv_heads=1, experts=8, top_k=2,
                              ffn=16, seq=10, batch=3, aux_coef=0.05, capacity_factor=1.0, step=7,
                              optimizer=dict(lr_peak=2e-3, lr_min=1e-4, warmup=3, decay=12)),
                     std=0.3, clip_ratio=2.0, state=True),
    # MHA, top-1 of 3, past the decay (lr = min), clipping disabled, a wide RoPE theta.
    "top1": dict(cfg=_cfg(vocab=40, hidden=24, layers=2, heads=2, kv_heads=2, experts=3, top_k=1,
                          ffn=20, seq=9, batch=2, aux_coef=0.01, step=50, rope_theta=500000.0,
                          optimizer=dict(lr_peak=1e-3, lr_min=5e-4, warmup=2, decay=10,
                                         max_grad_norm=0.0, weight_decay=0.05)),
                 std=0.2, clip_ratio=None, state=False),
}


def write_self_test_dump(out_dir, case="gqa_dense", seed=0, perturb_grads=False, verbose=True,
                         precision="fp32", flip_near_tie=False):
    """Write a dump computed in float64 by this script (precision "fp32"), or
    with the bf16 recipe in float32 (precision "bf16"; flip_near_tie: route the
    token of the closest router near tie to its (k+1)-th expert, as another
    correct implementation may).  Returns the name of the perturbed gradient
    tensor (or None)."""
    use_precision(precision)
    try:
        return _write_self_test_dump(out_dir, case, seed, perturb_grads, verbose, precision, flip_near_tie)
    finally:
        use_precision("fp32")


def _write_self_test_dump(out_dir, case, seed, perturb_grads, verbose, precision, flip_near_tie):
    spec = SELF_TEST_CASES[case]
    cfg = Config.from_dict(spec["cfg"].to_dict())
    cfg.precision = precision
    model = MixtralForCausalLM(cfg).double() if precision == "fp32" else MixtralForCausalLM(cfg).float()
    init_params(model, seed, std=spec["std"], norm_jitter=0.1)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=g)
    targets = torch.roll(tokens, -1, dims=1)
    targets[:, -1] = -100                                    # no next token: ignored
    targets[torch.rand(targets.shape, generator=g) < 0.15] = -100  # some more ignored targets

    met, grads, stats = forward_backward(model, tokens, targets)
    gap = min(s["min_topk_gap"] for s in stats) if stats else float("inf")
    if flip_near_tie:
        ties = sorted((t[0], j, t[1], t[3]) for j, st in enumerate(stats) for t in st["near_ties"])
        if not ties:
            raise RuntimeError(f"self-test case {case} seed {seed}: no router near tie to flip")
        _, j, tok, swapped = ties[0]
        model.model.layers[cfg.moe_layers[j]].moe.forced = {tok: swapped}
        met, grads, _ = forward_backward(model, tokens, targets)
        if verbose:
            print(f"routed token {tok} of MoE layer {cfg.moe_layers[j]} to experts {swapped} (a near tie)")
    elif gap < 1e-6:
        raise RuntimeError(f"self-test case {case} seed {seed}: router near-tie ({gap:.1e}); pick another seed")
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: v.double() for n, v in grads.items()}
    norm = global_grad_norm(grads)
    if spec["clip_ratio"] is not None:
        cfg.optimizer.max_grad_norm = spec["clip_ratio"] * norm  # < 1: clipping is active
    state0 = {}
    if spec["state"]:
        for n, gr in grads.items():
            m = 0.5 * gr + 0.01 * torch.randn(gr.shape, generator=g, dtype=torch.float64) * gr.std()
            state0[n] = (m, m * m + (0.1 * gr.std()) ** 2)
    after, _, info = adamw_step(params, grads, state0, cfg.optimizer, cfg.step)

    perturbed = None
    if perturb_grads:
        # Perturb one expert's w1 gradient by 1e-3 of its norm: far above the
        # tolerance, far below anything visible in the loss.
        cands = [n for n in grads if "experts" in n and ".w1." in n and float(grads[n].norm()) > 0]
        perturbed = cands[len(cands) // 2]
        noise = torch.randn(grads[perturbed].shape, generator=g, dtype=torch.float64)
        # bf16: 5e-2, five times the bf16 gradient tolerance.
        scale = 1e-3 if precision == "fp32" else 5e-2
        grads[perturbed] = grads[perturbed] + scale * grads[perturbed].norm() * noise / noise.norm()

    os.makedirs(out_dir, exist_ok=True)
    f32 = lambda d: {n: v.float().numpy() for n, v in d.items()}  # noqa: E731
    safetensors_io.save(f32(params), os.path.join(out_dir, "params.safetensors"))
    safetensors_io.save(f32(grads), os.path.join(out_dir, "grads.safetensors"))
    safetensors_io.save(f32(after), os.path.join(out_dir, "params_after.safetensors"),
                        metadata={"writer": "mixtral_reference.py self-test (float64)"})
    if state0:
        st = {}
        for n, (m, v) in state0.items():
            st[n + ".exp_avg"], st[n + ".exp_avg_sq"] = m, v
        safetensors_io.save(f32(st), os.path.join(out_dir, "optim_state.safetensors"))
    safetensors_io.save({"tokens": tokens.int().numpy(), "targets": targets.int().numpy()},
                        os.path.join(out_dir, "batch.safetensors"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg.to_dict(), f, indent=1)
    with open(os.path.join(out_dir, "metrics.json"), "w") as f:
        json.dump({"loss": met["loss"], "ce": met["ce"], "aux": met["aux"],
                   "grad_norm": info["grad_norm"], "lr": info["lr"]}, f, indent=1)
    if verbose:
        print(f"wrote self-test dump {out_dir} (case {case}, seed {seed}"
              f"{', perturbed ' + perturbed if perturbed else ''})")
    return perturbed


def semantic_checks():
    """Small hand-checkable properties of the semantics.  Returns list of failures."""
    fails = []

    def check(name, cond, detail=""):
        print(f"  [{'ok' if cond else 'FAIL'}] {name}{(': ' + detail) if detail else ''}")
        if not cond:
            fails.append(name)

    torch.manual_seed(0)
    dt = torch.float64

    # RoPE at position 0 is the identity (cos 0 = 1, sin 0 = 0 exactly).
    cos, sin = rope_tables(16, 8, 10000.0, dt)
    x = torch.randn(2, 3, 16, 8, dtype=dt)
    y = apply_rope(x, cos, sin)
    check("rope: position 0 is the identity", torch.equal(y[:, :, 0], x[:, :, 0]))
    # Against the formula written out by hand at p = 3, d = 8: pairs (i, i+4), angle 3*10000^(-2i/8).
    p, xv = 3, x[0, 0, 3]
    hand = torch.empty(8, dtype=dt)
    for i in range(4):
        a = p * 10000.0 ** (-2 * i / 8)
        hand[i] = xv[i] * math.cos(a) - xv[i + 4] * math.sin(a)
        hand[i + 4] = xv[i + 4] * math.cos(a) + xv[i] * math.sin(a)
    check("rope: matches the rotate-half formula at p=3", torch.allclose(y[0, 0, 3], hand, atol=1e-14))
    check("rope: preserves norms", torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-12))
    q, k = torch.randn(8, dtype=dt), torch.randn(8, dtype=dt)
    qs, ks = apply_rope(q.expand(16, 8), cos, sin), apply_rope(k.expand(16, 8), cos, sin)
    check("rope: q.k depends only on the position difference",
          abs(float(qs[7] @ ks[4]) - float(qs[10] @ ks[7])) < 1e-12)

    # Router ties: equal probabilities -> lower expert id first.
    _, idx, w, _ = route(torch.zeros(1, 4, dtype=dt), 2)
    check("router: all-equal logits pick experts [0, 1] with weights 1/2",
          idx.tolist() == [[0, 1]] and torch.allclose(w, torch.full_like(w, 0.5)), f"idx {idx.tolist()}")
    _, idx, _, _ = route(torch.tensor([[2.0, 1.0, 2.0, 2.0]], dtype=dt), 2)
    check("router: tie among experts 0,2,3 at the top keeps [0, 2]", idx.tolist() == [[0, 2]], f"{idx.tolist()}")
    _, idx, _, _ = route(torch.tensor([[1.0, 3.0, 0.5, 3.0, 3.0]], dtype=dt), 3)
    check("router: descending order, ties by id: [1, 3, 4]", idx.tolist() == [[1, 3, 4]], f"{idx.tolist()}")
    lg = torch.tensor([[0.3, -1.0, 2.0, 0.1]], dtype=dt)
    pp, idx, w, cnt = route(lg, 2)
    pr = torch.softmax(lg, -1)[0]
    check("router: renormalised top-k weights",
          idx.tolist() == [[2, 0]] and torch.allclose(w[0], pr[[2, 0]] / (pr[2] + pr[0])))

    # Capacity: hand example, T=4, k=2, E=2, cf=0.5 -> C = ceil(0.5*4*2/2) = 2.
    idx = torch.tensor([[0, 1], [0, 1], [0, 1], [1, 0]])
    dropped = apply_capacity(idx, 2, moe_capacity(0.5, 4, 2, 2))
    # Slot 0 in token order: e0,e0,e0,e1 -> third e0 (token 2) dropped; slot 1: e1 (t0) admitted,
    # e1 (t1) dropped (e1 full: t3's first choice + t0), e1 (t2) dropped, e0 (t3) dropped (e0 full).
    check("capacity: slot-major hand example",
          dropped.tolist() == [[0, 1], [0, -1], [-1, -1], [1, -1]], f"{dropped.tolist()}")
    idx = torch.stack([torch.randperm(6)[:3] for _ in range(20)])
    C = moe_capacity(1.1, 20, 3, 6)
    loop, load = idx.clone(), [0] * 6
    for j in range(3):               # the admission loop as semantics.md words it
        for tt in range(20):
            e = int(idx[tt, j])
            if load[e] < C:
                load[e] += 1
            else:
                loop[tt, j] = -1
    check("capacity: vectorised admission == literal loop", torch.equal(apply_capacity(idx, 6, C), loop),
          f"C={C}, dropped {int((loop < 0).sum())}")

    # Load balancing: uniform router with perfectly balanced counts gives aux = k;
    # and it equals HF's load_balancing_loss_func for one layer.
    T, E, kk = 8, 4, 2
    aux = load_balancing_loss(torch.full((T, E), 1.0 / E, dtype=dt), torch.full((E,), T * kk // E), T)
    check("aux: uniform & balanced router gives aux = k", abs(float(aux) - kk) < 1e-12, f"{float(aux)}")
    lg = torch.randn(T, E, dtype=dt)
    pr, idx, _, cnt = route(lg, kk)
    mask = F.one_hot(idx, E).to(dt)                                  # HF: [T, k, E]
    hf = (mask.mean(0) * pr.mean(0)[None]).sum() * E
    check("aux: equals HF load_balancing_loss_func (one layer)",
          abs(float(load_balancing_loss(pr, cnt, T)) - float(hf)) < 1e-12)

    # Cross-entropy: ignored targets; all ignored -> 0 with zero gradient.
    lg = torch.randn(6, 10, dtype=dt, requires_grad=True)
    tg = torch.tensor([3, -100, 0, 9, -100, 2])
    check("ce: equals F.cross_entropy(ignore_index=-100)",
          abs(float(cross_entropy(lg, tg)) - float(F.cross_entropy(lg, tg, ignore_index=-100))) < 1e-12)
    tg2 = torch.tensor([3, -1, 0, 9, -7, 2])
    check("ce: any negative target is ignored", float(cross_entropy(lg, tg2)) == float(cross_entropy(lg, tg)))
    ce0 = cross_entropy(lg, torch.full((6,), -100))
    ce0.backward()
    check("ce: no valid target -> 0, zero gradient", float(ce0) == 0.0 and float(lg.grad.abs().max()) == 0.0)

    # GQA mapping: query head h reads kv head h // (nh/nkv).
    cfg = _cfg(vocab=8, hidden=16, layers=1, heads=4, kv_heads=2, experts=2, top_k=1, ffn=8, seq=3, batch=1)
    att = Attention(cfg).double()
    with torch.no_grad():
        att.q_proj.weight.zero_(); att.k_proj.weight.zero_()  # uniform attention
        att.v_proj.weight.zero_()
        att.v_proj.weight[0:4, 0] = 1.0          # kv head 0 carries x[...,0]
        att.v_proj.weight[4:8, 1] = 1.0          # kv head 1 carries x[...,1]
        att.o_proj.weight.copy_(torch.eye(16, dtype=dt))
    xx = torch.zeros(1, 3, 16, dtype=dt)
    xx[..., 0], xx[..., 1] = 1.0, 2.0
    c3, s3 = rope_tables(3, 4, 10000.0, dt)
    out = att(xx, c3, s3)[0, 0].view(4, 4)[:, 0]  # first element of each query head
    check("gqa: heads 0,1 read kv head 0; heads 2,3 read kv head 1", out.tolist() == [1.0, 1.0, 2.0, 2.0],
          f"{out.tolist()}")

    # Causality and the MoE grouping vs a dense, obviously-correct evaluation.
    cfg = _cfg(vocab=32, hidden=16, layers=2, heads=2, kv_heads=1, experts=4, top_k=2, ffn=12, seq=8,
               batch=2, dense_layers=[1])
    m = MixtralForCausalLM(cfg).double()
    init_params(m, 3, std=0.3)
    tok = torch.randint(0, 32, (2, 8))
    tok2 = tok.clone()
    tok2[:, 5] = (tok2[:, 5] + 1) % 32
    h1 = m.model.layers[0](m.model.embed_tokens(tok), *m.rope())[0]
    h2 = m.model.layers[0](m.model.embed_tokens(tok2), *m.rope())[0]
    check("attention: causal (changing token 5 leaves positions 0..4 unchanged)",
          torch.equal(h1[:, :5], h2[:, :5]) and not torch.equal(h1[:, 5:], h2[:, 5:]))
    blk = m.model.layers[0].moe
    xt = torch.randn(10, 16, dtype=dt)
    y, _ = blk(xt)
    pr, idx, w, _ = route(blk.gate(xt), 2)
    allout = torch.stack([blk.experts[e](xt) for e in range(4)], 1)   # [T, E, H]
    dense = (allout.gather(1, idx[..., None].expand(-1, -1, 16)) * w[..., None]).sum(1)
    check("moe: grouped index_add_ == dense evaluation of all experts", torch.allclose(y, dense, atol=1e-13))
    blk.cf = 0.5
    y, _ = blk(xt)
    pr, idx, w, _ = route(blk.gate(xt), 2, 0.5)
    keep = (idx >= 0).to(dt)[..., None]
    dense = (allout.gather(1, idx.clamp(min=0)[..., None].expand(-1, -1, 16)) * w[..., None] * keep).sum(1)
    check("moe: dropped slots contribute nothing (cf=0.5)",
          torch.allclose(y, dense, atol=1e-13) and bool((idx < 0).any()), f"{int((idx < 0).sum())} dropped")

    # LR schedule at its boundaries.
    o = OptimConfig(lr_peak=1.0, lr_min=0.1, warmup=4, decay=14)
    lrs = [lr_at(s, o) for s in (0, 3, 4, 9, 14, 99)]
    check("lr: warmup (s+1)/w, peak at s=w-1 and s=w, midpoint, min after decay",
          np.allclose(lrs, [0.25, 1.0, 1.0, 0.55, 0.1, 0.1], atol=1e-15), f"{lrs}")

    # The float64 AdamW step equals torch.optim.AdamW + clip_grad_norm_ with per-group decay.
    ps = {"model.layers.0.input_layernorm.weight": torch.randn(5, dtype=dt),
          "model.norm.weight": torch.randn(3, dtype=dt), "lm_head.weight": torch.randn(4, 3, dtype=dt)}
    gs = {n: torch.randn_like(v) for n, v in ps.items()}
    o = OptimConfig(lr_peak=1e-2, lr_min=1e-3, warmup=0, decay=10, beta1=0.8, beta2=0.9, eps=1e-6,
                    weight_decay=0.3, max_grad_norm=1.0)
    st = {n: (torch.randn_like(v), torch.rand_like(v)) for n, v in ps.items()}
    step = 2
    mine, _, info = adamw_step(ps, gs, st, o, step)
    tp = {n: nn.Parameter(v.clone()) for n, v in ps.items()}
    opt = torch.optim.AdamW(
        [{"params": [tp[n] for n in tp if is_decayed(n)], "weight_decay": o.weight_decay},
         {"params": [tp[n] for n in tp if not is_decayed(n)], "weight_decay": 0.0}],
        lr=lr_at(step, o), betas=(o.beta1, o.beta2), eps=o.eps)
    for n, prm in tp.items():
        prm.grad = gs[n].clone()
        opt.state[prm] = {"step": torch.tensor(float(step)), "exp_avg": st[n][0].clone(),
                          "exp_avg_sq": st[n][1].clone()}
    nrm = torch.nn.utils.clip_grad_norm_(list(tp.values()), o.max_grad_norm)
    opt.step()
    err = max(float((tp[n].detach() - mine[n]).abs().max()) for n in ps)
    check("adamw: equals torch.optim.AdamW + clip_grad_norm_ (t = step+1, norms not decayed)",
          err < 1e-14 and abs(float(nrm) - info["grad_norm"]) < 1e-12 and info["clip_coef"] < 1, f"max diff {err:.1e}")

    # safetensors round trip, including a hand-made BF16 tensor.
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "t.safetensors")
        a = {"x": np.random.randn(3, 4).astype(np.float32), "i": np.arange(6, dtype=np.int32).reshape(2, 3),
             "s": np.array(2.5, np.float32)}
        safetensors_io.save(a, path, metadata={"k": "v"})
        b, meta = safetensors_io.load(path, with_metadata=True)
        ok = all(np.array_equal(a[n], b[n]) and a[n].dtype == b[n].dtype and a[n].shape == b[n].shape for n in a)
        hdr = json.dumps({"h": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
        with open(path, "wb") as f:  # bf16 of 1.0, -2.0, 0.15625 is 0x3F80, 0xC000, 0x3E20
            f.write(len(hdr).to_bytes(8, "little") + hdr + np.array([0x3F80, 0xC000, 0x3E20], "<u2").tobytes())
        bf = safetensors_io.load(path)["h"]
        check("safetensors: F32/I32/scalar round trip, metadata, BF16 read",
              ok and meta == {"k": "v"} and bf.tolist() == [1.0, -2.0, 0.15625] and bf.dtype == np.float32)
    return fails


def self_test(keep=None, seed=0):
    root = keep or tempfile.mkdtemp(prefix="moec_ref_selftest_")
    os.makedirs(root, exist_ok=True)
    problems = []
    try:
        print("== semantic checks")
        problems += [f"semantic check: {f}" for f in semantic_checks()]
        for case in SELF_TEST_CASES:
            d = os.path.join(root, case)
            print(f"\n== {case}: float64-written dump, checked in float32 (must PASS)")
            write_self_test_dump(d, case, seed)
            if not check_dump(d, torch.float32, failures_only=False):
                problems.append(f"{case}: float32 check of a correct dump failed")
            print(f"\n== {case}: same dump, checked in float64 (must PASS)")
            if not check_dump(d, torch.float64, failures_only=True):
                problems.append(f"{case}: float64 check of a correct dump failed")
        d = os.path.join(root, "perturbed")
        print("\n== gqa_dense with one perturbed gradient (must FAIL, naming that tensor)")
        bad = write_self_test_dump(d, "gqa_dense", seed, perturb_grads=True)
        ok = check_dump(d, torch.float32, failures_only=True)
        print(f"(expected failure on grad:{bad})")
        if ok:
            problems.append("perturbed dump passed the checker")
        # Corrupt metrics and a parameter update too: both must be caught.
        d2 = os.path.join(root, "perturbed_update")
        print("\n== gqa_dense with a wrong lr in metrics and one corrupted updated parameter (must FAIL)")
        write_self_test_dump(d2, "gqa_dense", seed)
        mp = os.path.join(d2, "metrics.json")
        with open(mp) as f:
            m = json.load(f)
        m["lr"] *= 1.001
        with open(mp, "w") as f:
            json.dump(m, f)
        ap = os.path.join(d2, "params_after.safetensors")
        after = safetensors_io.load(ap)
        after["model.norm.weight"] = after["model.norm.weight"] + np.float32(1e-3)
        safetensors_io.save(after, ap)
        ok2 = check_dump(d2, torch.float32, failures_only=True)
        if ok2:
            problems.append("dump with a corrupted update passed the checker")
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print()
    if problems:
        print("SELF-TEST FAILED:\n  " + "\n  ".join(problems))
        return False
    print("SELF-TEST PASSED: semantic checks ok; correct dumps pass in float32 and float64; "
          "perturbed dumps fail.")
    return True


def bf16_semantic_checks():
    """The bf16 recipe's primitives on hand-checkable values.  Returns list of failures."""
    fails = []

    def check(name, cond, detail=""):
        print(f"  [{'ok' if cond else 'FAIL'}] {name}{(': ' + detail) if detail else ''}")
        if not cond:
            fails.append(name)

    u = 2.0 ** -8  # half a BF16 ulp at 1 (an ulp at 1 is 2^-7)
    x = torch.tensor([1 + u, 1 + 3 * u, -(1 + u + 2.0 ** -20), 1 + 2.0 ** -7, 3.0e38, 2.0 ** -130],
                     dtype=torch.float32)
    want = [1.0, 1 + 2.0 ** -6, -(1 + 2.0 ** -7), 1 + 2.0 ** -7, float(torch.tensor(3.0e38).bfloat16()),
            2.0 ** -130]
    got = bf16_round(x).tolist()
    check("bf16 rounding: ties to even, above half rounds up, exact values stay, subnormals kept",
          got == want, f"{got}")
    use_precision("bf16")
    try:
        w = torch.tensor([1 + u, 2.0], requires_grad=True)
        (working(w) * torch.tensor([1 + u, 1.0])).sum().backward()
        check("working copy: BF16 forward, the fp32 gradient passes unrounded",
              working(w).tolist() == [1.0, 2.0] and w.grad.tolist() == [1 + u, 1.0], f"{w.grad.tolist()}")
        a = torch.tensor([1 + 3 * u], requires_grad=True)
        (act(a) * (1 + u)).sum().backward()
        check("activation: BF16 forward and gradient", a.grad.tolist() == [1.0], f"{a.grad.tolist()}")
        c = torch.tensor([1 + u], requires_grad=True)
        y = consumer(c)
        (y * (1 + 3 * u)).sum().backward()
        check("consumer gradient: forward unchanged, gradient BF16",
              y.tolist() == [1 + u] and c.grad.tolist() == [1 + 2.0 ** -6], f"{c.grad.tolist()}")
    finally:
        use_precision("fp32")
    check("fp32: the recipe's primitives are the identity", act(x) is x and working(x) is x and consumer(x) is x)
    return fails


def bf16_self_test(keep=None, seed=0):
    """The bf16 recipe: primitives, then correct dumps pass and planted errors fail."""
    root = keep or tempfile.mkdtemp(prefix="moec_ref_bf16_selftest_")
    os.makedirs(root, exist_ok=True)
    problems = []

    def rows(kind):
        return [r for r in LAST_REPORT if r[0] == kind]

    try:
        print("== bf16 semantic checks")
        problems += [f"bf16 semantic check: {f}" for f in bf16_semantic_checks()]
        for case in SELF_TEST_CASES:
            d = os.path.join(root, case)
            print(f"\n== {case}: float64-written fp32 dump, checked with the bf16 recipe "
                  f"(the difference is BF16 rounding: median gradient in [2^-12, 2^-4])")
            write_self_test_dump(d, case, seed)
            check_dump(d, failures_only=True, precision="bf16")
            # The recipe rounds: its gradients differ from exact ones by a
            # fraction of BF16's unit roundoff 2^-9 at least (a no-op recipe
            # would differ by fp32 rounding, ~1e-7), and by a few tens of u at
            # most on these small, large-activation cases (whose few tokens
            # average little; the tiny model's 512 differ by ~5e-3).
            errs = sorted(r[3] for r in rows("grad"))
            med = errs[len(errs) // 2]
            loss = [r[3] for r in rows("metric") if r[1] == "loss"][0]
            print(f"bf16 vs fp32: loss rel err {loss:.2e}; gradients median rel err {med:.2e}, "
                  f"max {errs[-1]:.2e}")
            if not 2.0 ** -12 <= med <= 2.0 ** -4:
                problems.append(f"{case}: bf16 vs fp32 median gradient difference {med:.2e} "
                                f"outside [2^-12, 2^-4]")

        d = os.path.join(root, "bf16")
        print("\n== gqa_dense written with the bf16 recipe, checked with it (must PASS, equal)")
        write_self_test_dump(d, "gqa_dense", seed, precision="bf16")
        if not check_dump(d, failures_only=True):
            problems.append("bf16 check of a bf16-written dump failed")
        worst = max(r[3] for r in rows("grad"))
        if worst > 1e-6:
            problems.append(f"bf16 reference is not deterministic: {worst:.2e} from its own dump")
        print("\n== the same dump checked in fp32 (must FAIL: the fp32 check sees BF16 rounding)")
        if check_dump(d, failures_only=True, precision="fp32"):
            problems.append("fp32 check of a bf16-written dump passed")

        d = os.path.join(root, "bf16_tie")
        print("\n== bf16 dump routing one near tie the other way (must PASS, resolving it)")
        write_self_test_dump(d, "gqa_dense", seed, precision="bf16", flip_near_tie=True)
        if not check_dump(d, failures_only=True):
            problems.append("bf16 check of a dump that routes a near tie the other way failed")
        print("\n== the same dump without resolving near ties (must FAIL: one token's routing matters)")
        global MAX_NEAR_TIES
        saved, MAX_NEAR_TIES = MAX_NEAR_TIES, 0
        try:
            if check_dump(d, failures_only=True):
                problems.append("a dump routing a token differently passed without resolving near ties")
        finally:
            MAX_NEAR_TIES = saved

        d = os.path.join(root, "bf16_perturbed")
        print("\n== bf16 dump with one gradient perturbed by 5e-2 (must FAIL)")
        bad = write_self_test_dump(d, "gqa_dense", seed, precision="bf16", perturb_grads=True)
        if check_dump(d, failures_only=True):
            problems.append(f"bf16 check passed a dump with grad:{bad} perturbed")

        d = os.path.join(root, "bf16_loss")
        print("\n== bf16 dump with the loss off by 5e-3 relative (must FAIL)")
        write_self_test_dump(d, "gqa_dense", seed, precision="bf16")
        mp = os.path.join(d, "metrics.json")
        with open(mp) as f:
            m = json.load(f)
        m["loss"] *= 1.005
        with open(mp, "w") as f:
            json.dump(m, f)
        if check_dump(d, failures_only=True):
            problems.append("bf16 check passed a dump with a wrong loss")
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print()
    if problems:
        print("BF16 SELF-TEST FAILED:\n  " + "\n  ".join(problems))
        return False
    print("BF16 SELF-TEST PASSED: primitives ok; fp32 dumps differ from the bf16 recipe by "
          "BF16 rounding; a bf16 dump, with a near tie routed either way, passes; perturbed dumps fail.")
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump_dir", nargs="?", help="step dump directory to check")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                    help="reference precision (float64 to diagnose whether a mismatch is rounding)")
    ap.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4)")
    ap.add_argument("--precision", choices=["fp32", "bf16"],
                    help="the recipe to check against (docs/precision.md; default: the dump's config, "
                         "else fp32); bf16 checks the loss within 2e-3 and gradients within 1e-2, "
                         "the optimizer's fp32 arithmetic within --rtol")
    ap.add_argument("--grad-reduce", choices=["fp32", "bf16"],
                    help="with --precision bf16: the dtype of the weight gradients "
                         "(moec --grad-reduce-dtype; default: the dump's config, else fp32)")
    ap.add_argument("--ulp-tol", type=float, default=4.0,
                    help="float32 ulps an updated parameter may differ by when its step is below "
                         "float32 resolution (default 4)")
    ap.add_argument("--failures-only", action="store_true", help="print only failing rows")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--self-test", action="store_true", help="run the self-test")
    ap.add_argument("--keep", metavar="DIR", help="self-test: keep the dumps under DIR")
    ap.add_argument("--write-self-test-dump", metavar="DIR", help="write a float64 self-test dump to DIR")
    ap.add_argument("--case", choices=list(SELF_TEST_CASES), default="gqa_dense")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--perturb-grads", action="store_true",
                    help="with --write-self-test-dump: perturb one gradient so the check must fail")
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    if args.self_test:
        if args.precision == "bf16":
            return 0 if bf16_self_test(args.keep, args.seed) else 1
        return 0 if self_test(args.keep, args.seed) else 1
    if args.write_self_test_dump:
        write_self_test_dump(args.write_self_test_dump, args.case, args.seed, args.perturb_grads)
        return 0
    if not args.dump_dir:
        ap.error("give a dump directory, --self-test or --write-self-test-dump DIR")
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    try:
        ok = check_dump(args.dump_dir, dtype, args.rtol, args.ulp_tol, args.failures_only, args.precision,
                        args.grad_reduce)
    except (OSError, ValueError, KeyError) as e:
        print(f"FAIL: cannot check {args.dump_dir}: {e}")
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
