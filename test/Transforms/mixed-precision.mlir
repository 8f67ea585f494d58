// The front half of moec's pipeline on a one-layer MoE, then
// moe-mixed-precision: fp32 leaves the step alone, bf16 stores it in BF16
// with fp32 masters (docs/precision.md).
// RUN: moe-opt %s --pass-pipeline='builtin.module(moe-expand-transformer,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision)' | FileCheck %s --check-prefix=FP32
// RUN: moe-opt %s --pass-pipeline='builtin.module(moe-expand-transformer,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision{target=h100})' | FileCheck %s --check-prefix=BF16
// RUN: moe-opt %s --pass-pipeline='builtin.module(moe-expand-transformer,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision{precision=bf16 grad-reduce-dtype=bf16})' | FileCheck %s --check-prefix=REDUCE
// The model's own request, and --precision overriding it.
// RUN: sed 's/aux_coef = 0.01 : f32}/aux_coef = 0.01 : f32, precision = #moe.precision<bf16>}/' %s > %t.requested.mlir
// RUN: moe-opt %t.requested.mlir --pass-pipeline='builtin.module(moe-expand-transformer,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision)' | FileCheck %s --check-prefix=BF16
// RUN: moe-opt %t.requested.mlir --pass-pipeline='builtin.module(moe-expand-transformer,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision{precision=fp32})' | FileCheck %s --check-prefix=FP32
// The router losses read the fp32 scores and logits, and the logits'
// gradient, summed over the router and the z-loss, stays fp32.
// RUN: sed 's/aux_coef = 0.01 : f32}/aux_coef = 0.01 : f32, z_loss_coef = 1.0e-3 : f32, seq_aux_coef = 1.0e-3 : f32}/' %s > %t.router-losses.mlir
// RUN: moe-opt %t.router-losses.mlir --pass-pipeline='builtin.module(moe-expand-transformer,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision{precision=bf16})' | FileCheck %s --check-prefix=ROUTER-LOSSES
// ROUTER-LOSSES: %[[LOGITS:.*]] = moe.linear %{{.*}}, %{{.*}} : (tensor<2x4x16xbf16>, tensor<2x16xbf16>) -> tensor<2x4x2xf32>
// ROUTER-LOSSES: moe.sequence_aux_loss %{{.*}}, %{{.*}} : (tensor<2x4x2xf32>, tensor<2x4x1xi32>) -> tensor<f32>
// ROUTER-LOSSES: moe.z_loss %[[LOGITS]] : (tensor<2x4x2xf32>) -> tensor<f32>
// ROUTER-LOSSES: %[[DZ:.*]] = moe.z_loss_grad %{{.*}}, %[[LOGITS]] : (tensor<f32>, tensor<2x4x2xf32>) -> tensor<2x4x2xf32>
// ROUTER-LOSSES: %[[DROUTER:.*]] = moe.router_grad
// ROUTER-LOSSES: moe.add %[[DZ]], %[[DROUTER]] : tensor<2x4x2xf32>
// Bad requests.
// RUN: not moe-opt %s --pass-pipeline='builtin.module(moe-expand-transformer,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision{precision=fp16})' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not moe-opt %s --pass-pipeline='builtin.module(moe-expand-transformer,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision{grad-reduce-dtype=bf16})' 2>&1 | FileCheck %s --check-prefix=COMBINATION
// RUN: not moe-opt %s --pass-pipeline='builtin.module(moe-expand-transformer,moe-autodiff{function=forward output=forward_backward},moe-optimizer{function=forward_backward output=train_step},moe-mixed-precision{precision=bf16},moe-mixed-precision{precision=bf16})' 2>&1 | FileCheck %s --check-prefix=TWICE

moe.transformer @m {vocab = 32, hidden = 16, layers = 1, heads = 2,
                    kv_heads = 1, experts = 2, top_k = 1, ffn = 16,
                    seq = 4, batch = 2, aux_coef = 0.01 : f32}

// FP32-NOT: bf16
// FP32-NOT: moe.precision
// FP32: moe.adamw_update @lm_head.weight, {{.*}} weight_decay = 1.000000e-01 : f32} : tensor<32x16xf32>

// The recipe is recorded on the module.
// BF16: module attributes {{{.*}}moe.precision = {compute = "bf16", grad_reduce = "fp32"}, moe.target = "{{(h100|cpu)}}"}
// Each weight is followed by its BF16 working copy, sharded as it is.
// BF16: moe.param @model.embed_tokens.weight : tensor<32x16xf32>
// BF16-NEXT: moe.param @model.embed_tokens.weight.bf16 : tensor<32x16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.embed_tokens.weight}
// Optimizer state stays fp32 and gets no copy.
// BF16: moe.param @model.embed_tokens.weight.exp_avg : tensor<32x16xf32>
// BF16-NOT: exp_avg.bf16
// The forward reads the copies; activations are BF16.
// BF16: moe.get_param @model.embed_tokens.weight.bf16 : tensor<32x16xbf16>
// BF16: moe.embedding {{.*}} -> tensor<2x4x16xbf16>
// BF16: moe.rms_norm {{.*}} : (tensor<2x4x16xbf16>, tensor<16xbf16>) -> tensor<2x4x16xbf16>
// Attention's statistics stay fp32.
// BF16: moe.attention {{.*}} -> (tensor<2x4x16xbf16>, tensor<2x2x4xf32>)
// The gate GEMM reads BF16 and writes the router's logits in fp32.
// BF16: %[[LOGITS:.*]] = moe.linear %{{.*}}, %{{.*}} : (tensor<2x4x16xbf16>, tensor<2x16xbf16>) -> tensor<2x4x2xf32>
// BF16: moe.router %[[LOGITS]] {top_k = 1 : i64} : (tensor<2x4x2xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x1xf32>, tensor<2x4x1xi32>)
// BF16: moe.experts {{.*}} : (tensor<2x4x16xbf16>, tensor<2x4x1xf32>, tensor<2x4x1xi32>, tensor<2x16x16xbf16>, tensor<2x16x16xbf16>, tensor<2x16x16xbf16>) -> tensor<2x4x16xbf16>
// BF16: moe.cross_entropy {{.*}} : (tensor<2x4x32xbf16>, tensor<2x4xi32>) -> tensor<f32>
// Activation gradients are BF16, weight gradients fp32.
// BF16: moe.cross_entropy_grad {{.*}} -> tensor<2x4x32xbf16>
// BF16: moe.linear_grad_weight {{.*}} : (tensor<2x4x32xbf16>, tensor<2x4x16xbf16>) -> tensor<32x16xf32>
// BF16: moe.experts_grad {{.*}} -> (tensor<2x4x16xbf16>, tensor<2x4x1xf32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>)
// BF16: moe.router_grad {{.*}} -> tensor<2x4x2xf32>
// BF16: moe.embedding_grad {{.*}} : (tensor<2x4x16xbf16>, tensor<2x4xi32>) -> tensor<32x16xf32>
// BF16-NOT: moe.cast
// BF16: moe.global_norm
// AdamW updates the fp32 master and rounds it into the copy.
// BF16: moe.adamw_update @lm_head.weight, @lm_head.weight.exp_avg, @lm_head.weight.exp_avg_sq, {{.*}}working_copy = @lm_head.weight.bf16} : tensor<32x16xf32>

// With BF16 reductions the weight gradients are BF16, widened once before
// the global norm (a reduction over ranks goes before the cast).
// REDUCE: moe.precision = {compute = "bf16", grad_reduce = "bf16"}
// REDUCE: %[[DW:.*]] = moe.linear_grad_weight {{.*}} -> tensor<32x16xbf16>
// REDUCE: moe.embedding_grad {{.*}} -> tensor<32x16xbf16>
// REDUCE: %[[WIDE:.*]] = moe.cast %[[DW]] : tensor<32x16xbf16> to tensor<32x16xf32>
// REDUCE: moe.global_norm
// REDUCE: moe.adamw_update @lm_head.weight, @lm_head.weight.exp_avg, @lm_head.weight.exp_avg_sq, %[[WIDE]],

// UNKNOWN: error: --precision: unknown precision 'fp16' (known: fp32, bf16)
// COMBINATION: error: --grad-reduce-dtype=bf16 needs --precision=bf16
// TWICE: error: 'moe.param' op is already a working copy: the step is already in mixed precision (moe-mixed-precision runs once)
