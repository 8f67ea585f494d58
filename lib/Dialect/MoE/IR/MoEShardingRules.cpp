//===- MoEShardingRules.cpp - the factor rule of every moe op -------------===//
//
// Letters: b batch, s sequence, h hidden, k contracted or top-k, n output
// features, v vocabulary, e experts, f expert width, g key/value head groups,
// r query heads per group, d head dimension, t the keys' sequence, *
// leading (token) dimensions.
// Pinned factors are those whose math needs the whole dimension on one rank
// (a norm's features, a softmax's classes, attention's keys).
//
//===----------------------------------------------------------------------===//
#include "moe/Dialect/MoE/IR/MoEOps.h"

using namespace mlir;
using namespace mlir::moe;

#define SIMPLE_RULE(OP, SPEC, PINNED)                                         \
  FailureOr<ShardingRule> OP::getShardingRule() {                            \
    return ShardingRule::fromSpec(*this, SPEC, PINNED);                      \
  }

SIMPLE_RULE(GetParamOp, "->*", "")
SIMPLE_RULE(ShardOp, "*->*", "")
SIMPLE_RULE(ConstantOp, "->*", "")
SIMPLE_RULE(EmbeddingOp, "bs,vh->bsh", "v")
SIMPLE_RULE(EmbeddingGradOp, "bsh,bs->vh", "v")
// Per-head norms (num_heads): the heads may be split (tensor parallel),
// each head's features not.
FailureOr<ShardingRule> RMSNormOp::getShardingRule() {
  if (std::optional<uint64_t> heads = getNumHeads())
    return ShardingRule::fromSpec(*this, "*(hd),d->*(hd)", "d",
                                  {{'h', static_cast<int64_t>(*heads)}});
  return ShardingRule::fromSpec(*this, "*h,h->*h", "h");
}
FailureOr<ShardingRule> RMSNormGradOp::getShardingRule() {
  if (std::optional<uint64_t> heads = getNumHeads())
    return ShardingRule::fromSpec(*this, "*(hd),*(hd),d->*(hd),d", "d",
                                  {{'h', static_cast<int64_t>(*heads)}});
  return ShardingRule::fromSpec(*this, "*h,*h,h->*h,h", "h");
}
// An addend is added once, so the contracted factor of a linear with one
// must not be split (partial sums plus the addend on every rank).
FailureOr<ShardingRule> LinearOp::getShardingRule() {
  if (getAddend())
    return ShardingRule::fromSpec(*this, "*k,nk,*n->*n", "k");
  return ShardingRule::fromSpec(*this, "*k,nk->*n", "");
}
FailureOr<ShardingRule> LinearGradInputOp::getShardingRule() {
  if (getAddend())
    return ShardingRule::fromSpec(*this, "*n,nk,*k->*k", "n");
  return ShardingRule::fromSpec(*this, "*n,nk->*k", "");
}
SIMPLE_RULE(LinearGradWeightOp, "*n,*k->nk", "")
SIMPLE_RULE(SwiGLUOp, "*,*->*", "")
SIMPLE_RULE(SwiGLUGradOp, "*,*,*->*,*", "")
SIMPLE_RULE(AddOp, "*,*->*", "")
SIMPLE_RULE(CastOp, "*->*", "")
FailureOr<ShardingRule> RouterOp::getShardingRule() {
  return ShardingRule::fromSpec(
      *this, getBias() ? "*e,e->*e,*k,*k" : "*e->*e,*k,*k", "ek");
}
// Experts: a token's output sums over the experts it was routed to, so the
// expert factor e is contracted; splitting tokens and experts over one axis
// is expert parallelism, which the partitioner lowers to all-to-alls.
// The saved up projections [..., k, 2, F] follow the tokens, the slots and
// the expert width; c is the pair (w1 x, w3 x).
FailureOr<ShardingRule> ExpertsOp::getShardingRule() {
  return ShardingRule::fromSpec(*this,
                                getHidden() ? "*h,*k,*k,efh,efh,ehf->*h,*kcf"
                                            : "*h,*k,*k,efh,efh,ehf->*h",
                                "hkc");
}

FailureOr<ShardingRule> ExpertsGradOp::getShardingRule() {
  return ShardingRule::fromSpec(
      *this,
      getHidden() ? "*h,*h,*k,*k,efh,efh,ehf,*kcf->*h,*k,efh,efh,ehf"
                  : "*h,*h,*k,*k,efh,efh,ehf->*h,*k,efh,efh,ehf",
      "hkc");
}

// Document masking's positions ([B, S]) follow the batch and sequence.
// The sequence may be split (context parallelism): each token is rotated
// by its own position, which the partitioned op finds from its rank's
// place in the split (sequence_axes).
FailureOr<ShardingRule> RoPEOp::getShardingRule() {
  return ShardingRule::fromSpec(
      *this, getPositions() ? "bs(hd),bs->bs(hd)" : "bs(hd)->bs(hd)", "d",
      {{'h', static_cast<int64_t>(getNumHeads())}});
}

FailureOr<ShardingRule> RoPEGradOp::getShardingRule() {
  return ShardingRule::fromSpec(
      *this, getPositions() ? "bs(hd),bs->bs(hd)" : "bs(hd)->bs(hd)", "d",
      {{'h', static_cast<int64_t>(getNumHeads())}});
}

// Query heads come in groups (g) that share one key/value head, r queries
// per group: splitting the groups splits queries, keys, values and the
// log-sum-exp consistently.
// Splitting the heads splits every per-head part; a shared rhs stays whole
// and its gradient (split_heads' rhs) is a sum over the split heads.
FailureOr<ShardingRule> ConcatHeadsOp::getShardingRule() {
  return ShardingRule::fromSpec(
      *this, hasSharedRhs() ? "*(ha),*c->*(hd)" : "*(ha),*(hc)->*(hd)", "acd",
      {{'h', static_cast<int64_t>(getNumHeads())}});
}
FailureOr<ShardingRule> SplitHeadsOp::getShardingRule() {
  return ShardingRule::fromSpec(
      *this, hasSharedRhs() ? "*(hd)->*(ha),*c" : "*(hd)->*(ha),*(hc)", "acd",
      {{'h', static_cast<int64_t>(getNumHeads())}}, true);
}

// The values' head dim (v) may differ from the queries' and keys' (d).
// The queries' sequence (s) may be split (context parallelism); the keys'
// and values' (t) may not: every query block needs every earlier key, so
// the partitioner gathers them (and reduce-scatters their gradients, which
// are sums over the query blocks).
FailureOr<ShardingRule> AttentionOp::getShardingRule() {
  int64_t groups = getNumKvHeads(), perGroup = getNumHeads() / groups;
  std::string operands = "bs(grd),bt(gd),bt(gv)";
  if (getPositions())
    operands += ",bs";
  return ShardingRule::fromSpec(*this, operands + "->bs(grv),b(gr)s", "trdv",
                                {{'g', groups}, {'r', perGroup}});
}

FailureOr<ShardingRule> AttentionGradOp::getShardingRule() {
  int64_t groups = getNumKvHeads(), perGroup = getNumHeads() / groups;
  std::string operands = "bs(grv),bs(grd),bt(gd),bt(gv),bs(grv),b(gr)s";
  if (getPositions())
    operands += ",bs";
  return ShardingRule::fromSpec(*this, operands + "->bs(grd),bt(gd),bt(gv)",
                                "trdv", {{'g', groups}, {'r', perGroup}});
}

FailureOr<ShardingRule> RouterGradOp::getShardingRule() {
  std::string spec = "*k,*e";
  if (getProbsGrad())
    spec += ",*e";
  if (getBias())
    spec += ",e";
  return ShardingRule::fromSpec(*this, spec + "->*e", "ek");
}

// Means over tokens: partial values are not sums (the partitioner combines
// counts and sums explicitly).
FailureOr<ShardingRule> CrossEntropyOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, "*v,*->", "v", {}, false);
}
FailureOr<ShardingRule> CrossEntropyGradOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, ",*v,*->*v", "v", {}, false);
}
// The fused LM head needs each token's whole logits row, so neither the
// vocabulary nor the hidden features it contracts may be split; the
// tokens may. Its weight gradient sums over the tokens: split tokens leave
// partial sums, as moe.linear_grad_weight's do.
FailureOr<ShardingRule> LinearCrossEntropyOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, "*h,vh,*->,*", "vh", {}, false);
}
FailureOr<ShardingRule> LinearCrossEntropyGradOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, ",*h,vh,*,*->*h,vh", "vh", {}, true);
}
// Counts over split tokens are summed by the op itself (token_axes).
FailureOr<ShardingRule> ExpertLoadOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, "*k->", "k", {}, false);
}
FailureOr<ShardingRule> AuxLossOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, "*e->", "e", {}, false);
}
FailureOr<ShardingRule> AuxLossGradOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, ",*e->*e", "e", {}, false);
}

// The sequence-wise loss sums over the sequences and their tokens itself
// (batch_axes, sequence_axes): its factors *0 and *1.
FailureOr<ShardingRule> SequenceAuxLossOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, "*e,*k->", "ek", {}, false);
}
FailureOr<ShardingRule> SequenceAuxLossGradOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, ",*e,*k->*e", "ek", {}, false);
}
FailureOr<ShardingRule> ZLossOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, "*e->", "e", {}, false);
}
FailureOr<ShardingRule> ZLossGradOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, ",*e->*e", "e", {}, false);
}

FailureOr<ShardingRule> WeightedSumOp::getShardingRule() {
  return ShardingRule::fromTensorsWithOwnFactors(*this);
}
FailureOr<ShardingRule> GlobalNormOp::getShardingRule() {
  return ShardingRule::fromTensorsWithOwnFactors(*this);
}
FailureOr<ShardingRule> ClipCoefficientOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, "->", "", {}, false);
}
FailureOr<ShardingRule> LearningRateOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, "->", "", {}, false);
}
// The gradient is updated where its parameter is stored: propagation ties it
// to the parameter's sharding.
FailureOr<ShardingRule> AdamWUpdateOp::getShardingRule() {
  return ShardingRule::fromSpec(*this, "*,,,->", "", {}, true);
}
