//===- OpTable.td - every opcode of the artifact, once ---------*- tablegen -*-===//
//
// The single definition of each opcode's layout: its number, operands,
// results (names, dtypes, shapes), named attributes and the hand-written
// rules the verifier runs. Generated from it (OpTableGen.py, at
// build time): the schema's Opcode enum, the runtime's enum and names, the
// verifier's signature checks, the writer's builders, the accessor views
// the backends run, the dispatcher and the disassembler. The semantics of
// each op are docs/semantics.md's.
//
//===----------------------------------------------------------------------===//

include "OpTableBase.td"

// How the expert GEMMs' inputs are scaled to FP8 (version 1.3; none and
// delayed since 1.4). The names are moec's (moe.experts `fp8`).
def Fp8Scaling : Enum<"Fp8Scaling", [
  EnumCase<"none", 0>,       // full-precision GEMMs, FP8 token dispatch only
  EnumCase<"tensorwise", 1>, // one scale per tensor, from its amax
  EnumCase<"blockwise", 2>,  // one scale per block
  EnumCase<"delayed", 3>     // per tensor, from an amax history
]>;

// Scaled RoPE (3.10): how the rotation frequencies are stretched for a
// longer context than pretraining's (HF's rope_type; docs/semantics.md).
def RopeScaling : Enum<"RopeScaling", [
  EnumCase<"linear", 1>, EnumCase<"yarn", 2>, EnumCase<"llama3", 3>
]>;


def Embedding : Op<0> {
  let operands = (ins Ids<"[...]">:$tokens, Float<"[V, H]">:$table);
  let results = (outs Float<"[..., H]">:$y);
}
def EmbeddingGrad : Op<1> {
  let operands = (ins Float<"[..., H]">:$dy, Ids<"[...]">:$tokens);
  let results = (outs Float<"[V, H]">:$dtable);
}
def RmsNorm : Op<2> {
  let operands = (ins Float<"[..., H]">:$x, Float<"[H]">:$w);
  let results = (outs Float<"[..., H]">:$y);
  let attributes = (attrs FloatAttr<"$_ > 0", "must be > 0">:$eps);
}
def RmsNormGrad : Op<3> {
  let operands = (ins Float<"[..., H]">:$dy, Float<"[..., H]">:$x,
                      Float<"[H]">:$w);
  let results = (outs Float<"[..., H]">:$dx, Float<"[H]">:$dw);
  let attributes = (attrs FloatAttr<"$_ > 0", "must be > 0">:$eps);
}
def Linear : Op<4> {
  let operands = (ins Float<"[..., K]">:$x, Float<"[N, K]">:$w);
  let results = (outs Float<"[..., N]">:$y);
}
def LinearGradInput : Op<5> {
  let operands = (ins Float<"[..., N]">:$dy, Float<"[N, K]">:$w);
  let results = (outs Float<"[..., K]">:$dx);
}
def LinearGradWeight : Op<6> {
  let operands = (ins Float<"[..., N]">:$dy, Float<"[..., K]">:$x);
  let results = (outs Float<"[N, K]">:$dw);
}
// Rotary positions are the sequence index: [B, S, heads * head_dim].
//
// Context parallelism (3.8): with a `sequence` group, the instruction holds
// this rank's block of the sequence dimension, split over the group's axes
// (load-balanced when cp leads them, semantics::balancedRuns): RoPE rotates
// each token by its position in the whole sequence, and attention's
// queries are the block while its keys and values are the whole sequence
// (positions in the whole, causal by them). The group is only read for
// this rank's block: nothing communicates over it.
def Rope : Op<7> {
  let operands = (ins Float<"[B, S, X]">:$x);
  let results = (outs Float<"[B, S, X]">:$y);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          FloatAttr<"$_ > 0", "must be > 0">:$theta,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"rope_scaling", EnumAttr<RopeScaling>>:$scaling,
                          OptionalAttr<"rope_scaling", IntAttr<>>:$original_max_positions,
                          OptionalAttr<"rope_scaling", BoolAttr>:$truncate,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$beta_fast,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$beta_slow,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$low_freq_factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$high_freq_factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$attention_factor);
  let inPlace = 1;
  let rules = ["checkRopeWidth", "checkRopeScaling"];
  let communicates = 0;
}
def RopeGrad : Op<8> {
  let operands = (ins Float<"[B, S, X]">:$dy);
  let results = (outs Float<"[B, S, X]">:$dx);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          FloatAttr<"$_ > 0", "must be > 0">:$theta,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"rope_scaling", EnumAttr<RopeScaling>>:$scaling,
                          OptionalAttr<"rope_scaling", IntAttr<>>:$original_max_positions,
                          OptionalAttr<"rope_scaling", BoolAttr>:$truncate,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$beta_fast,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$beta_slow,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$low_freq_factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$high_freq_factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$attention_factor);
  let inPlace = 1;
  let rules = ["checkRopeWidth", "checkRopeScaling"];
  let communicates = 0;
}
// k and v are [B, S, kv_heads * head_dim], lse [B, heads, S]
// (checkAttention). The scores are scale_factor * q.k / sqrt(head_dim)
// (3.10; 1 when absent): DeepSeek's YaRN correction of the softmax scale,
// on every attention opcode alike.
def Attention : Op<9> {
  let operands = (ins Float<"[B, S, Q]">:$q, Float<>:$k, Float<>:$v);
  let results = (outs Float<"[B, S, Q]">:$out, Tensor<>:$lse);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          IntAttr<>:$kv_heads,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"scale", FloatAttr<"$_ > 0", "must be > 0">>:$scale_factor);
  let rules = ["checkAttention"];
  let communicates = 0;
}
def AttentionGrad : Op<10> {
  let operands = (ins Float<"[B, S, Q]">:$dout, Float<"[B, S, Q]">:$q,
                      Float<>:$k, Float<>:$v, Float<"[B, S, Q]">:$out,
                      Tensor<>:$lse);
  let results = (outs Float<"[B, S, Q]">:$dq, Float<>:$dk, Float<>:$dv);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          IntAttr<>:$kv_heads,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"scale", FloatAttr<"$_ > 0", "must be > 0">>:$scale_factor);
  let rules = ["checkAttention"];
  let communicates = 0;
}
def Router : Op<11> {
  let operands = (ins Tensor<"[..., E]">:$logits);
  let results = (outs Tensor<"[..., E]">:$probs,
                      Tensor<"[..., $top_k]">:$weights,
                      Ids<"[..., $top_k]">:$indices);
  let attributes = (attrs IntAttr<>:$top_k,
                          FloatAttr<"$_ >= 0", "must be >= 0">:$capacity_factor);
  let rules = ["checkTopK"];
}
def RouterGrad : Op<12> {
  let operands = (ins Tensor<"[..., $top_k]">:$dweights,
                      Tensor<"[..., E]">:$probs,
                      OptionalTensor<"[..., E]">:$dprobs);
  let results = (outs Tensor<"[..., E]">:$dlogits);
  let attributes = (attrs IntAttr<>:$top_k);
  let rules = ["checkTopK"];
}
// With the group, expert parallel over it (Program.fbs); with the FP8
// recipe, FP8 GEMMs and/or FP8 token dispatch (version 1.3), delayed
// scaling reading and updating the amax history [El, 9, L].
def Experts : Op<13> {
  let operands = (ins Float<"[..., H]">:$x, Tensor<"[..., k]">:$weights,
                      Ids<"[..., k]">:$indices, Float<"[E, F, H]">:$w1,
                      Float<"[E, F, H]">:$w3, Float<"[E, H, F]">:$w2,
                      OptionalTensor<>:$amax_history);
  let results = (outs Float<"[..., H]">:$y);
  let attributes = (attrs
      OptionalAttr<"group", GroupAttr>:$group,
      OptionalAttr<"fp8", EnumAttr<Fp8Scaling>>:$fp8_scaling,
      OptionalAttr<"fp8", IntAttr<"$_ >= 1 && $_ <= 65536",
                                  "must be in [1, 65536]">>:$fp8_block,
      OptionalAttr<"fp8", BoolAttr>:$fp8_dispatch);
  let rules = ["checkFp8Recipe", "checkExpertRouting"];
}
def ExpertsGrad : Op<14> {
  let operands = (ins Float<"[..., H]">:$dy, Float<"[..., H]">:$x,
                      Tensor<"[..., k]">:$weights, Ids<"[..., k]">:$indices,
                      Float<"[E, F, H]">:$w1, Float<"[E, F, H]">:$w3,
                      Float<"[E, H, F]">:$w2, OptionalTensor<>:$amax_history);
  let results = (outs Float<"[..., H]">:$dx, Tensor<"[..., k]">:$dweights,
                      Float<"[E, F, H]">:$dw1, Float<"[E, F, H]">:$dw3,
                      Float<"[E, H, F]">:$dw2);
  let attributes = (attrs
      OptionalAttr<"group", GroupAttr>:$group,
      OptionalAttr<"fp8", EnumAttr<Fp8Scaling>>:$fp8_scaling,
      OptionalAttr<"fp8", IntAttr<"$_ >= 1 && $_ <= 65536",
                                  "must be in [1, 65536]">>:$fp8_block,
      OptionalAttr<"fp8", BoolAttr>:$fp8_dispatch);
  let rules = ["checkFp8Recipe", "checkExpertRouting"];
}
def Swiglu : Op<15> {
  let operands = (ins Float<>:$gate, Float<"=gate">:$up);
  let results = (outs Float<"=gate">:$y);
}
def SwigluGrad : Op<16> {
  let operands = (ins Float<>:$dy, Float<"=dy">:$gate, Float<"=dy">:$up);
  let results = (outs Float<"=dy">:$dgate, Float<"=dy">:$dup);
  let inPlace = 1;
}
def Add : Op<17> {
  let operands = (ins Float<>:$a, Float<"=a">:$b);
  let results = (outs Float<"=a">:$y);
  let inPlace = 1;
}
// Losses may carry the group their tokens are split over (version 1.1):
// counts and sums combine across it.
def CrossEntropy : Op<18> {
  let operands = (ins Float<"[..., V]">:$logits, Ids<"[...]">:$targets);
  let results = (outs Scalar:$loss);
  let attributes = (attrs OptionalAttr<"group", GroupAttr>:$group);
}
def CrossEntropyGrad : Op<19> {
  let operands = (ins Scalar:$dloss, Float<"[..., V]">:$logits,
                      Ids<"[...]">:$targets);
  let results = (outs Float<"[..., V]">:$dlogits);
  let attributes = (attrs OptionalAttr<"group", GroupAttr>:$group);
}
def AuxLoss : Op<20> {
  let operands = (ins Tensor<"[..., E]">:$probs);
  let results = (outs Scalar:$loss);
  let attributes = (attrs IntAttr<>:$top_k,
                          OptionalAttr<"group", GroupAttr>:$group);
  let rules = ["checkTopK"];
}
def AuxLossGrad : Op<21> {
  let operands = (ins Scalar:$dloss, Tensor<"[..., E]">:$probs);
  let results = (outs Tensor<"[..., E]">:$dprobs);
  let attributes = (attrs IntAttr<>:$top_k,
                          OptionalAttr<"group", GroupAttr>:$group);
  let rules = ["checkTopK"];
}
def WeightedSum : Op<22> {
  let operands = (ins Variadic<"[]">:$scalars);
  let results = (outs Scalar:$sum);
  let attributes = (attrs PerOperand<FloatAttr<>>:$coefficient);
  let inPlace = 1;
}
// Fills y with the value.
def Constant : Op<23> {
  let results = (outs Tensor<>:$y);
  let attributes = (attrs FloatAttr<>:$value);
}
// Each operand may be split over a group: its squares sum over it.
def GlobalNorm : Op<24> {
  let operands = (ins Variadic<>:$grads);
  let results = (outs Scalar:$norm);
  let attributes = (attrs PerOperand<GroupOrNoneAttr, 1>:$group);
  let inPlace = 1;
}
def ClipCoefficient : Op<25> {
  let operands = (ins Scalar:$norm);
  let results = (outs Scalar:$coef);
  let attributes = (attrs FloatAttr<>:$max_norm);
  let inPlace = 1;
}
def LearningRate : Op<26> {
  let operands = (ins Ids<"[]">:$step);
  let results = (outs Scalar:$lr);
  let attributes = (attrs IntAttr<"$_ >= 0", "must be >= 0">:$warmup,
                          IntAttr<"$_ >= $warmup", "must be >= warmup">:$decay,
                          FloatAttr<"$_ >= $min", "must be >= min">:$peak,
                          FloatAttr<"$_ >= 0", "must be >= 0">:$min);
}
// Updates param, exp_avg and exp_avg_sq in place.
def AdamW : Op<27> {
  let operands = (ins Tensor<>:$param, Tensor<"=param">:$grad,
                      Tensor<"=param">:$exp_avg, Tensor<"=param">:$exp_avg_sq,
                      Scalar:$lr, Scalar:$grad_scale, Ids<"[]">:$step,
                      OptionalTensor<"=param", [BF16]>:$working);
  let attributes = (attrs
      FloatAttr<"$_ >= 0 && $_ < 1", "must be in [0, 1)">:$beta1,
      FloatAttr<"$_ >= 0 && $_ < 1", "must be in [0, 1)">:$beta2,
      FloatAttr<"$_ > 0", "must be > 0">:$eps,
      FloatAttr<"$_ >= 0", "must be >= 0">:$weight_decay);
  let rules = ["checkAdamW"];
}

// Collectives over a group of the mesh (Program.groups).
def AllReduce : Op<28, "1.1"> {
  let operands = (ins Float<>:$x);
  let results = (outs SameDType<"x", "=x">:$y);
  let attributes = (attrs GroupAttr:$group);
  let rules = ["checkCollectiveSize"];
}
// Concatenation along dim in group order; moves ids too.
def AllGather : Op<29, "1.1"> {
  let operands = (ins Tensor<"", [F32, BF16, I32]>:$x);
  let results = (outs SameDType<"x">:$y);
  let attributes = (attrs GroupAttr:$group, IntAttr<>:$dim);
  let rules = ["checkCollectiveSize", "checkCollectiveDim"];
}
// This rank's block of the sum along dim.
def ReduceScatter : Op<30, "1.1"> {
  let operands = (ins Float<>:$x);
  let results = (outs SameDType<"x">:$y);
  let attributes = (attrs GroupAttr:$group, IntAttr<>:$dim);
  let rules = ["checkCollectiveSize", "checkCollectiveDim"];
}
// This rank's block along dim, no communication.
def Slice : Op<31, "1.1"> {
  let operands = (ins Tensor<"", [F32, BF16, I32]>:$x);
  let results = (outs SameDType<"x">:$y);
  let attributes = (attrs GroupAttr:$group, IntAttr<>:$dim);
  let rules = ["checkCollectiveSize", "checkCollectiveDim"];
  let communicates = 0;
}
// Ends the step of an FP8 amax history [El, 9, L]; the group holds copies.
def Fp8AmaxUpdate : Op<32, "1.4"> {
  let operands = (ins Tensor<>:$history);
  let attributes = (attrs OptionalAttr<"group", GroupAttr>:$group);
  let rules = ["checkAmaxUpdate"];
}

// Mixed precision (3.1): the same values in the other float dtype, fp32 to
// bf16 rounding to nearest even, bf16 to fp32 exactly.
def Cast : Op<33, "3.1"> {
  let operands = (ins Float<>:$x);
  let results = (outs Float<"=x">:$y);
  let rules = ["checkCast"];
}

// Saved expert activations (3.2): Experts that also writes the up
// projections of every routed slot, hidden[t, j] = (W1[e] x[t], W3[e] x[t])
// for e = indices[t, j] (zeros for a dropped slot), and ExpertsGrad that
// reads them instead of recomputing them. They hold the values the GEMMs
// computed, so a step gives the bits of the recomputing pair. On one rank
// only: with expert parallelism the rows live on the experts' ranks.
def ExpertsWithHidden : Op<34, "3.2"> {
  let operands = (ins Float<"[..., H]">:$x, Tensor<"[..., k]">:$weights,
                      Ids<"[..., k]">:$indices, Float<"[E, F, H]">:$w1,
                      Float<"[E, F, H]">:$w3, Float<"[E, H, F]">:$w2,
                      OptionalTensor<>:$amax_history);
  let results = (outs Float<"[..., H]">:$y, Tensor<"[..., k, 2, F]">:$hidden);
  let attributes = (attrs
      OptionalAttr<"group", GroupAttr>:$group,
      OptionalAttr<"fp8", EnumAttr<Fp8Scaling>>:$fp8_scaling,
      OptionalAttr<"fp8", IntAttr<"$_ >= 1 && $_ <= 65536",
                                  "must be in [1, 65536]">>:$fp8_block,
      OptionalAttr<"fp8", BoolAttr>:$fp8_dispatch);
  let rules = ["checkFp8Recipe", "checkExpertRouting", "checkHiddenOnOneRank"];
}
def ExpertsGradWithHidden : Op<35, "3.2"> {
  let operands = (ins Float<"[..., H]">:$dy, Float<"[..., H]">:$x,
                      Tensor<"[..., k]">:$weights, Ids<"[..., k]">:$indices,
                      Float<"[E, F, H]">:$w1, Float<"[E, F, H]">:$w3,
                      Float<"[E, H, F]">:$w2, Tensor<"[..., k, 2, F]">:$hidden,
                      OptionalTensor<>:$amax_history);
  let results = (outs Float<"[..., H]">:$dx, Tensor<"[..., k]">:$dweights,
                      Float<"[E, F, H]">:$dw1, Float<"[E, F, H]">:$dw3,
                      Float<"[E, H, F]">:$dw2);
  let attributes = (attrs
      OptionalAttr<"group", GroupAttr>:$group,
      OptionalAttr<"fp8", EnumAttr<Fp8Scaling>>:$fp8_scaling,
      OptionalAttr<"fp8", IntAttr<"$_ >= 1 && $_ <= 65536",
                                  "must be in [1, 65536]">>:$fp8_block,
      OptionalAttr<"fp8", BoolAttr>:$fp8_dispatch);
  let rules = ["checkFp8Recipe", "checkExpertRouting", "checkHiddenOnOneRank"];
}

// Gradient buckets (3.3): y[i] is AllReduce of x[i], or with `scatter`
// ReduceScatter of x[i] along dimension 0, for every i in one message:
// the backends pack the operands into one buffer, run one collective on it
// and unpack the results. The sums are elementwise, so the values are
// those of the separate collectives.
def ReduceBucket : Op<36, "3.3"> {
  let operands = (ins Variadic<"", [F32, BF16]>:$xs);
  let results = (outs Variadic<"", [F32, BF16]>:$ys);
  let attributes = (attrs GroupAttr:$group, BoolAttr:$scatter);
  let rules = ["checkReduceBucket"];
}

// The LM head fused with its loss (3.4): CrossEntropy of Linear(x, w)
// without the [..., V] logits. The forward keeps each token's log-sum-exp
// of its logits (lse, fp32); the gradient recomputes the logits block by
// block from it. `group` as CrossEntropy's.
def LinearCrossEntropy : Op<37, "3.4"> {
  let operands = (ins Float<"[..., H]">:$x, Float<"[V, H]">:$w,
                      Ids<"[...]">:$targets);
  let results = (outs Scalar:$loss, Tensor<"[...]">:$lse);
  let attributes = (attrs OptionalAttr<"group", GroupAttr>:$group);
}
def LinearCrossEntropyGrad : Op<38, "3.4"> {
  let operands = (ins Scalar:$dloss, Float<"[..., H]">:$x, Float<"[V, H]">:$w,
                      Ids<"[...]">:$targets, Tensor<"[...]">:$lse);
  let results = (outs Float<"[..., H]">:$dx, Float<"[V, H]">:$dw);
  let attributes = (attrs OptionalAttr<"group", GroupAttr>:$group);
}

// GEMMs that add their product to an addend in the epilogue (3.4), BLAS's
// beta = 1: y = addend + x w^T and dx = addend + dy w, moe.linear and
// moe.linear_grad_input with an addend (moe-fuse-gemm-epilogues). The
// result may be written over the addend.
def LinearAccumulate : Op<39, "3.4"> {
  let operands = (ins Float<"[..., K]">:$x, Float<"[N, K]">:$w,
                      Float<"[..., N]">:$addend);
  let results = (outs Float<"[..., N]">:$y);
  let inPlace = 1;
}
def LinearGradInputAccumulate : Op<40, "3.4"> {
  let operands = (ins Float<"[..., N]">:$dy, Float<"[N, K]">:$w,
                      Float<"[..., K]">:$addend);
  let results = (outs Float<"[..., K]">:$dx);
  let inPlace = 1;
}

// Routers with any selection rule (3.5), moe.router and moe.router_grad
// other than HF Mixtral's (which stay Router and RouterGrad): softmax or
// sigmoid scores, an optional per-expert bias that steers the selection
// only, the top-k among the experts of the best `top_groups` of `groups`
// groups, the routing weights renormalised or not and scaled
// (docs/semantics.md). The gradient reads dprobs always; its one optional
// operand is the bias.
def RouterScoring : Enum<"RouterScoring", [
  EnumCase<"softmax", 0>,
  EnumCase<"sigmoid", 1>
]>;
def ScoredRouter : Op<41, "3.5"> {
  let operands = (ins Tensor<"[..., E]">:$logits, OptionalTensor<"[E]">:$bias);
  let results = (outs Tensor<"[..., E]">:$probs,
                      Tensor<"[..., $top_k]">:$weights,
                      Ids<"[..., $top_k]">:$indices);
  let attributes = (attrs IntAttr<>:$top_k,
                          FloatAttr<"$_ >= 0", "must be >= 0">:$capacity_factor,
                          EnumAttr<RouterScoring>:$scoring, BoolAttr:$normalize,
                          FloatAttr<"$_ > 0", "must be > 0">:$scale,
                          IntAttr<"$_ >= 1", "must be >= 1">:$groups,
                          IntAttr<"$_ >= 1", "must be >= 1">:$top_groups);
  let rules = ["checkTopK", "checkRoutingGroups"];
}
def ScoredRouterGrad : Op<42, "3.5"> {
  let operands = (ins Tensor<"[..., $top_k]">:$dweights,
                      Tensor<"[..., E]">:$probs, Tensor<"[..., E]">:$dprobs,
                      OptionalTensor<"[E]">:$bias);
  let results = (outs Tensor<"[..., E]">:$dlogits);
  let attributes = (attrs IntAttr<>:$top_k, EnumAttr<RouterScoring>:$scoring,
                          BoolAttr:$normalize,
                          FloatAttr<"$_ > 0", "must be > 0">:$scale,
                          IntAttr<"$_ >= 1", "must be >= 1">:$groups,
                          IntAttr<"$_ >= 1", "must be >= 1">:$top_groups);
  let rules = ["checkTopK", "checkRoutingGroups"];
}

// Expert load accounting (3.5). ExpertLoad adds the assignments a router
// admitted (ids >= 0) per expert to `load` (an OptimizerState buffer [E]),
// in place, after summing them over `group` (the ranks that split the
// tokens), so every data rank holds the whole batch's load.
// ExpertLoadUpdate ends the step: with `bias` (the router's selection
// bias) bias[e] += rate * sign(mean(load) - load[e]) (DeepSeek-V3's
// auxiliary-loss-free balancing), then load = 0.
def ExpertLoad : Op<43, "3.5"> {
  let operands = (ins Ids<"[..., k]">:$indices, Tensor<"[E]">:$load);
  let attributes = (attrs OptionalAttr<"group", GroupAttr>:$group);
  let rules = ["checkExpertLoad"];
}
def ExpertLoadUpdate : Op<44, "3.5"> {
  let operands = (ins Tensor<"[E]">:$load, OptionalTensor<"[E]">:$bias);
  let attributes = (attrs FloatAttr<"$_ >= 0", "must be >= 0">:$rate);
  let communicates = 0;
  let rules = ["checkExpertLoadUpdate"];
}

// RMSNorm of each head (3.5): the last dimension X is `heads` heads of D
// features, each normalised on its own with the one weight [D] (Qwen3's
// q_norm and k_norm; moe.rms_norm with num_heads). The same math as
// RmsNorm over rows of D, with the weight gradient summed over the heads.
def HeadRmsNorm : Op<45, "3.5"> {
  let operands = (ins Float<"[..., X]">:$x, Float<"[D]">:$w);
  let results = (outs Float<"[..., X]">:$y);
  let attributes = (attrs FloatAttr<"$_ > 0", "must be > 0">:$eps,
                          IntAttr<"$_ >= 1", "must be >= 1">:$heads);
  let rules = ["checkHeadWidth"];
}
def HeadRmsNormGrad : Op<46, "3.5"> {
  let operands = (ins Float<"[..., X]">:$dy, Float<"[..., X]">:$x,
                      Float<"[D]">:$w);
  let results = (outs Float<"[..., X]">:$dx, Float<"[D]">:$dw);
  let attributes = (attrs FloatAttr<"$_ > 0", "must be > 0">:$eps,
                          IntAttr<"$_ >= 1", "must be >= 1">:$heads);
  let rules = ["checkHeadWidth"];
}

// Router losses (3.6): DeepSeek-V3's sequence-wise balance loss, over the
// router's own selection (indices, -1 for a dropped slot), the mean over
// the sequences of sum_e f[b, e] P[b, e]; the counts and score sums of one
// sequence combine over `sequence_group` (the ranks that split its tokens),
// the sequences' losses over `batch_group`. ST-MoE's router z-loss, the
// mean over the tokens of logsumexp(logits)^2, its sums over `group`.
def SequenceAuxLoss : Op<47, "3.6"> {
  let operands = (ins Tensor<"[B, S, E]">:$probs, Ids<"[B, S, K]">:$indices);
  let results = (outs Scalar:$loss);
  let attributes = (attrs GroupOrNoneAttr:$batch_group,
                          GroupOrNoneAttr:$sequence_group);
  let rules = ["checkSlots"];
}
def SequenceAuxLossGrad : Op<48, "3.6"> {
  let operands = (ins Scalar:$dloss, Tensor<"[B, S, E]">:$probs,
                      Ids<"[B, S, K]">:$indices);
  let results = (outs Tensor<"[B, S, E]">:$dprobs);
  let attributes = (attrs GroupOrNoneAttr:$batch_group,
                          GroupOrNoneAttr:$sequence_group);
  let rules = ["checkSlots"];
}
def ZLoss : Op<49, "3.6"> {
  let operands = (ins Tensor<"[..., E]">:$logits);
  let results = (outs Scalar:$loss);
  let attributes = (attrs OptionalAttr<"group", GroupAttr>:$group);
}
def ZLossGrad : Op<50, "3.6"> {
  let operands = (ins Scalar:$dloss, Tensor<"[..., E]">:$logits);
  let results = (outs Tensor<"[..., E]">:$dlogits);
  let attributes = (attrs OptionalAttr<"group", GroupAttr>:$group);
}

// Multi-head latent attention's pieces (3.6, DeepSeek-V2/V3). Attention
// whose values have a head width of their own: q [B, S, heads * d], k
// [B, S, kv_heads * d], v [B, S, kv_heads * dv], the output [B, S, heads
// * dv] (checkAttention). Scale 1/sqrt(d).
def AttentionValueDim : Op<51, "3.6"> {
  let operands = (ins Float<"[B, S, Q]">:$q, Float<>:$k, Float<>:$v);
  let results = (outs Float<"[B, S, O]">:$out, Tensor<>:$lse);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          IntAttr<>:$kv_heads,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"scale", FloatAttr<"$_ > 0", "must be > 0">>:$scale_factor);
  let rules = ["checkAttention"];
  let communicates = 0;
}
def AttentionValueDimGrad : Op<52, "3.6"> {
  let operands = (ins Float<"[B, S, O]">:$dout, Float<"[B, S, Q]">:$q,
                      Float<>:$k, Float<>:$v, Float<"[B, S, O]">:$out,
                      Tensor<>:$lse);
  let results = (outs Float<"[B, S, Q]">:$dq, Float<>:$dk, Float<>:$dv);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          IntAttr<>:$kv_heads,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"scale", FloatAttr<"$_ > 0", "must be > 0">>:$scale_factor);
  let rules = ["checkAttention"];
  let communicates = 0;
}
// Per-head concatenation: y [..., heads * (A + C)] holds each head's part
// of a [..., heads * A], then its part of b, which is [..., heads * C] or
// [..., C] shared by every head (MLA's one RoPE key for all heads).
// SplitHeads is the inverse; a shared b is then the sum over the heads,
// the adjoint of sharing it (checkHeadParts).
def ConcatHeads : Op<53, "3.6"> {
  let operands = (ins Float<"[..., X]">:$a, Float<"[..., Y]">:$b);
  let results = (outs Float<"[..., Z]">:$y);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads);
  let rules = ["checkHeadParts"];
}
def SplitHeads : Op<54, "3.6"> {
  let operands = (ins Float<"[..., Z]">:$x);
  let results = (outs Float<"[..., X]">:$a, Float<"[..., Y]">:$b);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads);
  let rules = ["checkHeadParts"];
}

// Tied parameters under pipeline stages (3.7): a parameter two stages hold
// (the embedding table the LM head reads) gets its gradient in two halves,
// one per stage. Each of the two stages runs this in its optimizer phase:
// the operand its own stage computed goes to the other stage, which sends
// its half back, and both add a + b in operand order (PipelineRules.cpp checks the stages).
def PipelineGradientSum : Op<55, "3.7"> {
  let operands = (ins Tensor<>:$a, Tensor<"=a">:$b);
  let results = (outs Tensor<"=a">:$sum);
}

// Document masking (3.7). `positions` [B, S] is each token's position in
// its document (0 at a document's first token; the step's `positions`
// input). RoPE rotates each token by it; attention lets a query see the
// keys of its own document up to itself, [s - positions[b, s], s]. The
// values may have a head width of their own, as AttentionValueDim's.
def DocumentRope : Op<56, "3.7"> {
  let operands = (ins Float<"[B, S, X]">:$x, Ids<"[B, S]">:$positions);
  let results = (outs Float<"[B, S, X]">:$y);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          FloatAttr<"$_ > 0", "must be > 0">:$theta,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"rope_scaling", EnumAttr<RopeScaling>>:$scaling,
                          OptionalAttr<"rope_scaling", IntAttr<>>:$original_max_positions,
                          OptionalAttr<"rope_scaling", BoolAttr>:$truncate,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$beta_fast,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$beta_slow,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$low_freq_factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$high_freq_factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$attention_factor);
  let inPlace = 1;
  let rules = ["checkRopeWidth", "checkRopeScaling"];
  let communicates = 0;
}
def DocumentRopeGrad : Op<57, "3.7"> {
  let operands = (ins Float<"[B, S, X]">:$dy, Ids<"[B, S]">:$positions);
  let results = (outs Float<"[B, S, X]">:$dx);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          FloatAttr<"$_ > 0", "must be > 0">:$theta,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"rope_scaling", EnumAttr<RopeScaling>>:$scaling,
                          OptionalAttr<"rope_scaling", IntAttr<>>:$original_max_positions,
                          OptionalAttr<"rope_scaling", BoolAttr>:$truncate,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$beta_fast,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$beta_slow,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$low_freq_factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$high_freq_factor,
                          OptionalAttr<"rope_scaling", FloatAttr<>>:$attention_factor);
  let inPlace = 1;
  let rules = ["checkRopeWidth", "checkRopeScaling"];
  let communicates = 0;
}
def DocumentAttention : Op<58, "3.7"> {
  let operands = (ins Float<"[B, S, Q]">:$q, Float<>:$k, Float<>:$v,
                      Ids<"[B, S]">:$positions);
  let results = (outs Float<"[B, S, O]">:$out, Tensor<>:$lse);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          IntAttr<>:$kv_heads,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"scale", FloatAttr<"$_ > 0", "must be > 0">>:$scale_factor);
  let rules = ["checkAttention"];
  let communicates = 0;
}
def DocumentAttentionGrad : Op<59, "3.7"> {
  let operands = (ins Float<"[B, S, O]">:$dout, Float<"[B, S, Q]">:$q,
                      Float<>:$k, Float<>:$v, Float<"[B, S, O]">:$out,
                      Tensor<>:$lse, Ids<"[B, S]">:$positions);
  let results = (outs Float<"[B, S, Q]">:$dq, Float<>:$dk, Float<>:$dv);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          IntAttr<>:$kv_heads,
                          OptionalAttr<"sequence", GroupAttr>:$sequence,
                          OptionalAttr<"scale", FloatAttr<"$_ > 0", "must be > 0">>:$scale_factor);
  let rules = ["checkAttention"];
  let communicates = 0;
}

// Ring attention (context parallelism, 3.8): q, k and v are all this
// rank's block of a sequence split over `sequence` (load-balanced when cp
// leads it, semantics::balancedRuns). The ranks of the group pass their
// key/value blocks around the ring, each step's transfer overlapping the
// attention of the block before, and merge the blocks' outputs by the
// online softmax: out and lse are DocumentAttention's (Attention's without
// positions) on the whole sequence, this rank's rows. The gradient passes
// the blocks again with their dk and dv accumulators, which return to
// their owner: dk and dv are the whole gradient's rows of this rank's
// block. The values may have a head width of their own.
def RingAttention : Op<60, "3.8"> {
  let operands = (ins Float<"[B, S, Q]">:$q, Float<>:$k, Float<>:$v,
                      OptionalTensor<"[B, S]", [I32]>:$positions);
  let results = (outs Float<"[B, S, O]">:$out, Tensor<>:$lse);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          IntAttr<>:$kv_heads, GroupAttr:$sequence,
                          OptionalAttr<"scale", FloatAttr<"$_ > 0", "must be > 0">>:$scale_factor);
  let rules = ["checkAttention"];
}
def RingAttentionGrad : Op<61, "3.8"> {
  let operands = (ins Float<"[B, S, O]">:$dout, Float<"[B, S, Q]">:$q,
                      Float<>:$k, Float<>:$v, Float<"[B, S, O]">:$out,
                      Tensor<>:$lse,
                      OptionalTensor<"[B, S]", [I32]>:$positions);
  let results = (outs Float<"[B, S, Q]">:$dq, Float<>:$dk, Float<>:$dv);
  let attributes = (attrs IntAttr<"$_ >= 1", "must be >= 1">:$heads,
                          IntAttr<>:$kv_heads, GroupAttr:$sequence,
                          OptionalAttr<"scale", FloatAttr<"$_ > 0", "must be > 0">>:$scale_factor);
  let rules = ["checkAttention"];
}

// ZeRO-1 (3.9): AdamW over this rank's block of a weight whose optimizer
// state is split over `group` along dimension 0 (in the group's order),
// while the copy the forward reads stays whole on every rank of it. grad,
// exp_avg and exp_avg_sq are this rank's block. Without `working`, param is
// that whole fp32 copy, updated at this rank's rows; with it (mixed
// precision), param is the block's fp32 master and `working` the whole
// BF16 copy, which gets the updated block rounded to nearest even at this
// rank's rows. The whole copy's blocks are then all-gathered over the group
// in place, so every rank reads the same updated weight.
def ShardedAdamW : Op<62, "3.9"> {
  let operands = (ins Tensor<>:$param, Tensor<>:$grad,
                      Tensor<"=grad">:$exp_avg, Tensor<"=grad">:$exp_avg_sq,
                      Scalar:$lr, Scalar:$grad_scale, Ids<"[]">:$step,
                      OptionalTensor<"", [BF16]>:$working);
  let attributes = (attrs
      FloatAttr<"$_ >= 0 && $_ < 1", "must be in [0, 1)">:$beta1,
      FloatAttr<"$_ >= 0 && $_ < 1", "must be in [0, 1)">:$beta2,
      FloatAttr<"$_ > 0", "must be > 0">:$eps,
      FloatAttr<"$_ >= 0", "must be >= 0">:$weight_decay,
      GroupAttr:$group);
  let rules = ["checkShardedAdamW"];
}
