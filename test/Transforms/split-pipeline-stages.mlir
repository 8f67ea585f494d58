// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-split-pipeline-stages="unit-stages=0,0,1,1 ranks=2 split-weight-gradients=true" | FileCheck %s --check-prefix=TINY
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-fp8="scaling=delayed" --moe-autodiff --moe-optimizer --moe-split-pipeline-stages="unit-stages=0,0,0,1 ranks=2" | FileCheck %s --check-prefix=FP8
// RUN: not moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-split-pipeline-stages="unit-stages=1,0,1,1 ranks=2" 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-split-pipeline-stages="unit-stages=0,1" 2>&1 | FileCheck %s --check-prefix=UNITS
// RUN: not moe-opt %s --split-input-file --moe-split-pipeline-stages="function=shared unit-stages=0,0,1,1 ranks=2" 2>&1 | FileCheck %s --check-prefix=SHARED
// RUN: moe-opt %inputs/reference-tied.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-split-pipeline-stages="unit-stages=0,0,1,1 ranks=2" | FileCheck %s --check-prefix=TIED
// RUN: not moe-opt %s --split-input-file --moe-split-pipeline-stages="function=thrice unit-stages=0,0,1,2,2 ranks=3" 2>&1 | FileCheck %s --check-prefix=THRICE
// RUN: not moe-opt %s --split-input-file --moe-split-pipeline-stages="function=unsummed unit-stages=0,0,1,1 ranks=2" 2>&1 | FileCheck %s --check-prefix=UNSUMMED

// The tiny model (embedding, layer 0 | layer 1, head) over two ranks.
// TINY: func.func @train_step({{.*}} attributes {moe.pipeline_ranks = 2 : i64}
// Named ops take their unit's stage; the residual adds, unnamed, the stage
// their operands come from (the last one for a forward value).
// TINY: moe.embedding {{.*}}{moe.pipeline_phase = "forward", moe.pipeline_stage = 0 : i64}
// TINY: %[[R0:.*]] = moe.add %{{.*}}, %{{.*}} {moe.pipeline_phase = "forward", moe.pipeline_stage = 0 : i64}
// TINY: moe.add %[[R0]], %{{.*}} {moe.pipeline_phase = "forward", moe.pipeline_stage = 0 : i64}
// TINY: moe.cross_entropy {{.*}}{moe.pipeline_phase = "forward", moe.pipeline_stage = 1 : i64}
// The loss seed has no operands: it joins its users, the head's backward.
// TINY: moe.constant 1.000000e+00 {moe.pipeline_phase = "backward", moe.pipeline_stage = 1 : i64}
// TINY: moe.aux_loss_grad {{.*}}{moe.pipeline_phase = "backward", moe.pipeline_stage = 1 : i64
// The gradient leaving stage 1 for stage 0 is summed on stage 1 (the first
// stage of its operands), then stage 1's weight gradients follow its last
// backward op, split off for zero-bubble schedules.
// TINY: %[[BOUNDARY:.*]] = moe.add %{{.*}}, %input_grad_5 {moe.pipeline_phase = "backward", moe.pipeline_stage = 1 : i64}
// TINY-NEXT: moe.linear_grad_weight {{.*}}{moe.pipeline_phase = "weight", moe.pipeline_stage = 1 : i64}
// TINY: moe.embedding_grad {{.*}}{moe.pipeline_phase = "backward", moe.pipeline_stage = 0 : i64}
// TINY-NEXT: moe.linear_grad_weight %[[BOUNDARY]], {{.*}}{moe.pipeline_phase = "weight", moe.pipeline_stage = 0 : i64}
// The optimizer: the norm on every rank, each AdamW on its parameter's.
// TINY: moe.global_norm {{.*}}moe.pipeline_phase = "optimizer", moe.pipeline_stage = -1 : i64
// TINY: moe.adamw_update @model.embed_tokens.weight, {{.*}}moe.pipeline_phase = "optimizer", moe.pipeline_stage = 0 : i64
// TINY: moe.adamw_update @lm_head.weight, {{.*}}moe.pipeline_phase = "optimizer", moe.pipeline_stage = 1 : i64

// An FP8 amax history lives with the experts that read it (layer 1 on
// stage 0 here), and moves on in that stage's optimizer.
// FP8: moe.experts {{.*}}moe.pipeline_phase = "forward", moe.pipeline_stage = 0 : i64
// FP8: moe.fp8_amax_update @model.layers.1.block_sparse_moe.experts.fp8_amax_history {moe.pipeline_phase = "optimizer", moe.pipeline_stage = 0 : i64}

// Tied embeddings: the table lives on the first stage (the lookup) and the
// last (the head). The autodiff sum of its two halves becomes one
// moe.pipeline_gradient_sum per stage, in the optimizer; the norm reads the
// first stage's, and each stage updates its copy.
// TIED: %[[HEAD:.*]] = moe.linear_grad_weight {{.*}}moe.pipeline_stage = 1 : i64
// TIED: %[[LOOKUP:.*]] = moe.embedding_grad {{.*}}moe.pipeline_stage = 0 : i64
// TIED-NEXT: %[[FIRST:.*]] = moe.pipeline_gradient_sum %[[HEAD]], %[[LOOKUP]] {moe.pipeline_phase = "optimizer", moe.pipeline_stage = 0 : i64}
// TIED-NEXT: %[[LAST:.*]] = moe.pipeline_gradient_sum %[[HEAD]], %[[LOOKUP]] {moe.pipeline_phase = "optimizer", moe.pipeline_stage = 1 : i64}
// TIED-NEXT: moe.global_norm %[[FIRST]],
// TIED-NOT: %[[LAST]]
// TIED: moe.adamw_update @model.embed_tokens.weight, {{.*}}, %[[FIRST]], {{.*}}moe.pipeline_stage = 0 : i64
// TIED-NEXT: moe.adamw_update @model.embed_tokens.weight, {{.*}}, %[[LAST]], {{.*}}moe.pipeline_stage = 1 : i64

// ORDER: error: 'moe.rms_norm' op in the forward of pipeline stage 0 reads a value of the forward of stage 1, which a pipeline schedule runs later
// UNITS: error: 'moe.rms_norm' op belongs to pipeline unit 2, but only 2 units have a stage

// A parameter lives on one stage.
module attributes {moe.model = {layers = 2 : i64}} {
  moe.param @w : tensor<4x4xf32> {init = #moe.init<zeros>}
  func.func @shared(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %w = moe.get_param @w : tensor<4x4xf32>
    %a = moe.linear %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("model.layers.0.mlp")
    // SHARED: error: loc("model.layers.1.mlp"): 'moe.linear' op reads @w on pipeline stage 1, which stage 0 reads too: a parameter lives on one stage
    %b = moe.linear %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("model.layers.1.mlp")
    return %b : tensor<2x4xf32>
  }
}

// -----

// A parameter read on three stages: two may share it, not three.
module attributes {moe.model = {layers = 3 : i64}} {
  moe.param @w : tensor<4x4xf32> {init = #moe.init<zeros>}
  moe.param @w.exp_avg : tensor<4x4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @w.exp_avg_sq : tensor<4x4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  func.func @thrice(%x: tensor<2x4xf32>, %g: tensor<4x4xf32>, %lr: tensor<f32>, %c: tensor<f32>, %step: tensor<i32>) -> tensor<2x4xf32> {
    %w = moe.get_param @w : tensor<4x4xf32>
    %a = moe.linear %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("model.layers.0.mlp")
    %b = moe.linear %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("model.layers.1.mlp")
    // THRICE: error: loc("model.layers.2.mlp"): 'moe.linear' op reads @w on pipeline stage 2, which stage 0 and stage 1 read too: a parameter lives on one stage, or on two that sum their halves of its gradient
    %d = moe.linear %b, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("model.layers.2.mlp")
    moe.adamw_update @w, @w.exp_avg, @w.exp_avg_sq, %g, %lr, %c, %step
        {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.1 : f32} : tensor<4x4xf32>
    return %d : tensor<2x4xf32>
  }
}

// -----

// Two stages share a parameter only by summing their halves of its
// gradient: here the update's gradient comes from elsewhere.
module attributes {moe.model = {layers = 2 : i64}} {
  moe.param @w : tensor<4x4xf32> {init = #moe.init<zeros>}
  moe.param @w.exp_avg : tensor<4x4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @w.exp_avg_sq : tensor<4x4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  func.func @unsummed(%x: tensor<2x4xf32>, %g: tensor<4x4xf32>, %lr: tensor<f32>, %c: tensor<f32>, %step: tensor<i32>) -> tensor<2x4xf32> {
    %w = moe.get_param @w : tensor<4x4xf32>
    %a = moe.linear %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("model.layers.0.mlp")
    %b = moe.linear %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> loc("model.layers.1.mlp")
    // UNSUMMED: error: 'moe.adamw_update' op updates @w, which pipeline stages 0 and 1 both read, but its gradient is not the sum of one half from each: stages share a parameter only so
    moe.adamw_update @w, @w.exp_avg, @w.exp_avg_sq, %g, %lr, %c, %step
        {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.1 : f32} : tensor<4x4xf32>
    return %b : tensor<2x4xf32>
  }
}
