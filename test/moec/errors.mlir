// Malformed IR, invalid models, missing files and an unwritable step are
// reported with their location and a non-zero exit.

// RUN: not moec %s.missing -o %t 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: moec: error: cannot open input file {{.*}}errors.mlir.missing{{.*}}: No such file or directory

// RUN: split-file %s %t.dir
// RUN: not moec %t.dir/syntax.mlir -o %t.moebin 2>&1 | FileCheck %s --check-prefix=SYNTAX
// SYNTAX: syntax.mlir:2:{{[0-9]+}}: error: expected
// RUN: not moec %t.dir/shape.mlir -o %t.moebin 2>&1 | FileCheck %s --check-prefix=SHAPE
// SHAPE: shape.mlir:4:{{[0-9]+}}: error: 'moe.linear' op expected the input's last dimension (8) to match the weight's in-features (16)
// RUN: not moec %t.dir/config.mlir -o %t.moebin 2>&1 | FileCheck %s --check-prefix=CONFIG
// CONFIG: config.mlir:1:1: error: 'moe.transformer' op expected hidden (30) to be divisible by heads (4)
// An attribute the op does not know is an error listing the known ones,
// not a plain Mixtral compiled without it.
// RUN: not moec %t.dir/unknown-attribute.mlir -o %t.moebin 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: unknown-attribute.mlir:1:1: error: 'moe.transformer' op has unknown attribute 'num_nextn_predict_layers'; known attributes: aux_coef, batch, bias_update_rate, capacity_factor, dense_ffn, dense_layers, document_mask, eos_token_id, experts, family, ffn, head_dim, heads, hidden, init_std, kv_heads, kv_lora_rank, layers, n_group, norm_topk_prob, precision, q_lora_rank, qk_nope_head_dim, qk_norm, qk_rope_head_dim, rms_eps, rope_interleave, rope_scaling, rope_theta, routed_scaling_factor, scoring, seq, seq_aux_coef, shared_experts, softmax_scale_factor, sym_name, tie_word_embeddings, top_k, topk_group, v_head_dim, vocab, z_loss_coef
// RUN: not moec %t.dir/unknown-discardable.mlir -o %t.moebin 2>&1 | FileCheck %s --check-prefix=DISCARDABLE
// DISCARDABLE: unknown-discardable.mlir:2:8: error: 'moe.linear' op has unknown attribute 'moe.pipline_stage'; known moe attributes: moe.arena_bytes,
// Absurd sizes are refused before anything is allocated for them.
// RUN: not moec %t.dir/layers.mlir -o %t.moebin 2>&1 | FileCheck %s --check-prefix=LAYERS
// LAYERS: layers.mlir:1:1: error: 'moe.transformer' op expected layers <= 4096, got 2147483647
// RUN: not moec %t.dir/ffn.mlir -o %t.moebin --report=memory 2>&1 | FileCheck %s --check-prefix=FFN
// FFN: ffn.mlir:1:1: error: 'moe.transformer' op expected ffn <= 262144, got 9223372036854775807
// RUN: not moec %t.dir/noplan.mlir -o %t.moebin --pass-pipeline="builtin.module(moe-no-such-pass)" 2>&1 | FileCheck %s --check-prefix=PIPELINE
// PIPELINE: error: 'moe-no-such-pass' does not refer to a registered pass or pass pipeline
// RUN: not moec %t.dir/noplan.mlir -o %t.moebin --pass-pipeline="builtin.module(moe-expand-transformer)" 2>&1 | FileCheck %s --check-prefix=NOSTEP
// NOSTEP: error: no function named 'train_step' to write as the training step

// RUN: not moec %t.dir/noplan.mlir -o %t.moebin --pass-pipeline="builtin.module(moe-expand-transformer,moe-autodiff,moe-optimizer)" 2>&1 | FileCheck %s --check-prefix=NOPLAN
// NOPLAN: noplan.mlir:1:1: error: 'func.func' op has no memory plan (run moe-plan-memory)
// RUN: not moec %t.dir/nokernel.mlir -o %t.moebin --pass-pipeline="builtin.module(moe-plan-memory)" 2>&1 | FileCheck %s --check-prefix=NOKERNEL
// NOKERNEL: nokernel.mlir:4:8: error: 'func.call' op has no runtime kernel (lower it before writing the artifact)
// RUN: not moec %t.dir/signature.mlir -o %t.moebin --pass-pipeline="builtin.module(moe-plan-memory)" 2>&1 | FileCheck %s --check-prefix=SIGNATURE
// SIGNATURE: signature.mlir:1:1: error: 'func.func' op expected train_step(tokens: tensor<BxSxi32>, targets: tensor<BxSxi32>, [positions: tensor<BxSxi32>,] step: tensor<i32>) -> (loss, grad_norm, lr: tensor<f32>)

//--- syntax.mlir
module {
  moe.transformer @broken {vocab = 16 hidden = 8}
}
//--- shape.mlir
moe.param @w : tensor<4x16xf32> {init = #moe.init<zeros>}
func.func @forward(%x: tensor<2x8xf32>) -> tensor<2x4xf32> {
  %w = moe.get_param @w : tensor<4x16xf32>
  %y = moe.linear %x, %w : (tensor<2x8xf32>, tensor<4x16xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
//--- config.mlir
moe.transformer @bad {vocab = 16, hidden = 30, layers = 1, heads = 4, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}
//--- unknown-attribute.mlir
moe.transformer @extra {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, num_nextn_predict_layers = 1}
//--- unknown-discardable.mlir
func.func @forward(%x: tensor<2x8xf32>, %w: tensor<4x8xf32>) -> tensor<2x4xf32> {
  %y = moe.linear %x, %w {moe.pipline_stage = 0} : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
//--- layers.mlir
moe.transformer @deep {vocab = 16, hidden = 8, layers = 2147483647, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}
//--- ffn.mlir
moe.transformer @wide {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 9223372036854775807, seq = 4, batch = 1}
//--- noplan.mlir
moe.transformer @ok {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}
//--- nokernel.mlir
func.func private @opaque(tensor<f32>) -> tensor<f32>
func.func @train_step(%t: tensor<1x2xi32>, %y: tensor<1x2xi32>, %s: tensor<i32>) -> (tensor<f32>, tensor<f32>, tensor<f32>) {
  %c = moe.constant 1.0 : tensor<f32>
  %d = func.call @opaque(%c) : (tensor<f32>) -> tensor<f32>
  return %c, %d, %d : tensor<f32>, tensor<f32>, tensor<f32>
}
//--- signature.mlir
func.func @train_step(%t: tensor<1x2xi32>) -> tensor<f32> {
  %c = moe.constant 1.0 : tensor<f32>
  return %c : tensor<f32>
}
