// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-split-pipeline-stages="unit-stages=0,0,1,1 ranks=2 split-weight-gradients=true" | FileCheck %s --check-prefix=TINY
// RUN: moe-opt %models/tiny.mlir --moe-expand-transformer --moe-fp8="scaling=delayed" --moe-autodiff --moe-optimizer --moe-split-pipeline-stages="unit-stages=0,0,0,1 ranks=2" | FileCheck %s --check-prefix=FP8
// RUN: not moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-split-pipeline-stages="unit-stages=1,0,1,1 ranks=2" 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not moe-opt %models/tiny.mlir --moe-expand-transformer --moe-autodiff --moe-optimizer --moe-split-pipeline-stages="unit-stages=0,1" 2>&1 | FileCheck %s --check-prefix=UNITS
// RUN: not moe-opt %s --moe-split-pipeline-stages="function=shared unit-stages=0,0,1,1 ranks=2" 2>&1 | FileCheck %s --check-prefix=SHARED

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
