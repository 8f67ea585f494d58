// A one-layer MoE training step in BF16 mixed precision, written by hand as
// moe-mixed-precision lays it out (docs/precision.md): each weight @W is an
// f32 master with a bf16 working copy @"W.bf16" that the forward and backward
// read; activations and their gradients are bf16; the router's logits,
// probabilities and top-k weights, the attention lse, the losses and every
// weight gradient are f32; AdamW updates the master and rounds it into the
// copy. Derived from moe-opt --moe-expand-transformer --moe-autodiff
// --moe-optimizer of a vocab 32, hidden 16, 2-expert top-1 model.
module attributes {moe.model = {aux_coef = 0.00999999977 : f32, batch = 2 : i64, capacity_factor = 0.000000e+00 : f32, dense_ffn = 32 : i64, dense_layers = array<i64>, experts = 2 : i64, ffn = 32 : i64, heads = 2 : i64, hidden = 16 : i64, init_std = 2.000000e-02 : f32, kv_heads = 1 : i64, layers = 1 : i64, name = "small", rms_eps = 9.99999974E-6 : f32, rope_theta = 1.000000e+04 : f32, seq = 8 : i64, top_k = 1 : i64, vocab = 32 : i64}} {
  moe.param @model.embed_tokens.weight : tensor<32x16xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.embed_tokens.weight.bf16" : tensor<32x16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.embed_tokens.weight}
  moe.param @model.embed_tokens.weight.exp_avg : tensor<32x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.embed_tokens.weight.exp_avg_sq : tensor<32x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.input_layernorm.weight : tensor<16xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @"model.layers.0.input_layernorm.weight.bf16" : tensor<16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.input_layernorm.weight}
  moe.param @model.layers.0.input_layernorm.weight.exp_avg : tensor<16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.input_layernorm.weight.exp_avg_sq : tensor<16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.q_proj.weight : tensor<16x16xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.self_attn.q_proj.weight.bf16" : tensor<16x16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.self_attn.q_proj.weight}
  moe.param @model.layers.0.self_attn.q_proj.weight.exp_avg : tensor<16x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.q_proj.weight.exp_avg_sq : tensor<16x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.k_proj.weight : tensor<8x16xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.self_attn.k_proj.weight.bf16" : tensor<8x16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.self_attn.k_proj.weight}
  moe.param @model.layers.0.self_attn.k_proj.weight.exp_avg : tensor<8x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.k_proj.weight.exp_avg_sq : tensor<8x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.v_proj.weight : tensor<8x16xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.self_attn.v_proj.weight.bf16" : tensor<8x16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.self_attn.v_proj.weight}
  moe.param @model.layers.0.self_attn.v_proj.weight.exp_avg : tensor<8x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.v_proj.weight.exp_avg_sq : tensor<8x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.o_proj.weight : tensor<16x16xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.self_attn.o_proj.weight.bf16" : tensor<16x16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.self_attn.o_proj.weight}
  moe.param @model.layers.0.self_attn.o_proj.weight.exp_avg : tensor<16x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.o_proj.weight.exp_avg_sq : tensor<16x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.post_attention_layernorm.weight : tensor<16xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @"model.layers.0.post_attention_layernorm.weight.bf16" : tensor<16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.post_attention_layernorm.weight}
  moe.param @model.layers.0.post_attention_layernorm.weight.exp_avg : tensor<16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.post_attention_layernorm.weight.exp_avg_sq : tensor<16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.block_sparse_moe.gate.weight : tensor<2x16xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.block_sparse_moe.gate.weight.bf16" : tensor<2x16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.block_sparse_moe.gate.weight}
  moe.param @model.layers.0.block_sparse_moe.gate.weight.exp_avg : tensor<2x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.block_sparse_moe.gate.weight.exp_avg_sq : tensor<2x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight" : tensor<2x32x16xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight.bf16" : tensor<2x32x16xbf16> {kind = #moe.param_kind<working_copy>, master = @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight"}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight.exp_avg" : tensor<2x32x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight.exp_avg_sq" : tensor<2x32x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight" : tensor<2x32x16xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight.bf16" : tensor<2x32x16xbf16> {kind = #moe.param_kind<working_copy>, master = @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight"}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight.exp_avg" : tensor<2x32x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight.exp_avg_sq" : tensor<2x32x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight" : tensor<2x16x32xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight.bf16" : tensor<2x16x32xbf16> {kind = #moe.param_kind<working_copy>, master = @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight"}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight.exp_avg" : tensor<2x16x32xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight.exp_avg_sq" : tensor<2x16x32xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.norm.weight : tensor<16xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @"model.norm.weight.bf16" : tensor<16xbf16> {kind = #moe.param_kind<working_copy>, master = @model.norm.weight}
  moe.param @model.norm.weight.exp_avg : tensor<16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.norm.weight.exp_avg_sq : tensor<16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @lm_head.weight : tensor<32x16xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"lm_head.weight.bf16" : tensor<32x16xbf16> {kind = #moe.param_kind<working_copy>, master = @lm_head.weight}
  moe.param @lm_head.weight.exp_avg : tensor<32x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @lm_head.weight.exp_avg_sq : tensor<32x16xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  func.func @train_step(%arg0: tensor<2x8xi32>, %arg1: tensor<2x8xi32>, %arg2: tensor<i32>) -> (tensor<f32>, tensor<f32>, tensor<f32>) {
    %0 = moe.get_param @"model.embed_tokens.weight.bf16" : tensor<32x16xbf16>
    %1 = moe.embedding %arg0, %0 : (tensor<2x8xi32>, tensor<32x16xbf16>) -> tensor<2x8x16xbf16>
    %2 = moe.get_param @"model.layers.0.input_layernorm.weight.bf16" : tensor<16xbf16>
    %3 = moe.rms_norm %1, %2 {epsilon = 9.99999974E-6 : f32} : (tensor<2x8x16xbf16>, tensor<16xbf16>) -> tensor<2x8x16xbf16>
    %4 = moe.get_param @"model.layers.0.self_attn.q_proj.weight.bf16" : tensor<16x16xbf16>
    %5 = moe.linear %3, %4 : (tensor<2x8x16xbf16>, tensor<16x16xbf16>) -> tensor<2x8x16xbf16>
    %6 = moe.get_param @"model.layers.0.self_attn.k_proj.weight.bf16" : tensor<8x16xbf16>
    %7 = moe.linear %3, %6 : (tensor<2x8x16xbf16>, tensor<8x16xbf16>) -> tensor<2x8x8xbf16>
    %8 = moe.get_param @"model.layers.0.self_attn.v_proj.weight.bf16" : tensor<8x16xbf16>
    %9 = moe.linear %3, %8 : (tensor<2x8x16xbf16>, tensor<8x16xbf16>) -> tensor<2x8x8xbf16>
    %10 = moe.rope %5 {num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<2x8x16xbf16>) -> tensor<2x8x16xbf16>
    %11 = moe.rope %7 {num_heads = 1 : i64, theta = 1.000000e+04 : f32} : (tensor<2x8x8xbf16>) -> tensor<2x8x8xbf16>
    %output, %lse = moe.attention %10, %11, %9 {num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<2x8x16xbf16>, tensor<2x8x8xbf16>, tensor<2x8x8xbf16>) -> (tensor<2x8x16xbf16>, tensor<2x2x8xf32>)
    %12 = moe.get_param @"model.layers.0.self_attn.o_proj.weight.bf16" : tensor<16x16xbf16>
    %13 = moe.linear %output, %12 : (tensor<2x8x16xbf16>, tensor<16x16xbf16>) -> tensor<2x8x16xbf16>
    %14 = moe.add %1, %13 : tensor<2x8x16xbf16>
    %15 = moe.get_param @"model.layers.0.post_attention_layernorm.weight.bf16" : tensor<16xbf16>
    %16 = moe.rms_norm %14, %15 {epsilon = 9.99999974E-6 : f32} : (tensor<2x8x16xbf16>, tensor<16xbf16>) -> tensor<2x8x16xbf16>
    %17 = moe.get_param @"model.layers.0.block_sparse_moe.gate.weight.bf16" : tensor<2x16xbf16>
    %18 = moe.linear %16, %17 : (tensor<2x8x16xbf16>, tensor<2x16xbf16>) -> tensor<2x8x2xf32>
    %probs, %weights, %indices = moe.router %18 {top_k = 1 : i64} : (tensor<2x8x2xf32>) -> (tensor<2x8x2xf32>, tensor<2x8x1xf32>, tensor<2x8x1xi32>)
    %19 = moe.get_param @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight.bf16" : tensor<2x32x16xbf16>
    %20 = moe.get_param @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight.bf16" : tensor<2x32x16xbf16>
    %21 = moe.get_param @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight.bf16" : tensor<2x16x32xbf16>
    %22 = moe.experts %16, %weights, %indices, %19, %20, %21 : (tensor<2x8x16xbf16>, tensor<2x8x1xf32>, tensor<2x8x1xi32>, tensor<2x32x16xbf16>, tensor<2x32x16xbf16>, tensor<2x16x32xbf16>) -> tensor<2x8x16xbf16>
    %23 = moe.aux_loss %probs {top_k = 1 : i64} : (tensor<2x8x2xf32>) -> tensor<f32>
    %24 = moe.add %14, %22 : tensor<2x8x16xbf16>
    %25 = moe.get_param @"model.norm.weight.bf16" : tensor<16xbf16>
    %26 = moe.rms_norm %24, %25 {epsilon = 9.99999974E-6 : f32} : (tensor<2x8x16xbf16>, tensor<16xbf16>) -> tensor<2x8x16xbf16>
    %27 = moe.get_param @"lm_head.weight.bf16" : tensor<32x16xbf16>
    %28 = moe.linear %26, %27 : (tensor<2x8x16xbf16>, tensor<32x16xbf16>) -> tensor<2x8x32xbf16>
    %29 = moe.cross_entropy %28, %arg1 : (tensor<2x8x32xbf16>, tensor<2x8xi32>) -> tensor<f32>
    %30 = moe.weighted_sum %29, %23 {coefficients = array<f32: 1.000000e+00, 0.00999999977>} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %31 = moe.constant 1.000000e+00 : tensor<f32>
    %32 = moe.weighted_sum %31 {coefficients = array<f32: 1.000000e+00>} : (tensor<f32>) -> tensor<f32>
    %33 = moe.weighted_sum %31 {coefficients = array<f32: 0.00999999977>} : (tensor<f32>) -> tensor<f32>
    %34 = moe.cross_entropy_grad %32, %28, %arg1 : (tensor<f32>, tensor<2x8x32xbf16>, tensor<2x8xi32>) -> tensor<2x8x32xbf16>
    %35 = moe.linear_grad_input %34, %27 : (tensor<2x8x32xbf16>, tensor<32x16xbf16>) -> tensor<2x8x16xbf16>
    %36 = moe.linear_grad_weight %34, %26 : (tensor<2x8x32xbf16>, tensor<2x8x16xbf16>) -> tensor<32x16xf32>
    %input_grad, %weight_grad = moe.rms_norm_grad %35, %24, %25 {epsilon = 9.99999974E-6 : f32} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<16xbf16>) -> (tensor<2x8x16xbf16>, tensor<16xf32>)
    %37 = moe.aux_loss_grad %33, %probs {top_k = 1 : i64} : (tensor<f32>, tensor<2x8x2xf32>) -> tensor<2x8x2xf32>
    %input_grad_0, %weights_grad, %w1_grad, %w3_grad, %w2_grad = moe.experts_grad %input_grad, %16, %weights, %indices, %19, %20, %21 : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x1xf32>, tensor<2x8x1xi32>, tensor<2x32x16xbf16>, tensor<2x32x16xbf16>, tensor<2x16x32xbf16>) -> (tensor<2x8x16xbf16>, tensor<2x8x1xf32>, tensor<2x32x16xf32>, tensor<2x32x16xf32>, tensor<2x16x32xf32>)
    %38 = moe.router_grad %weights_grad, %probs, %37 {top_k = 1 : i64} : (tensor<2x8x1xf32>, tensor<2x8x2xf32>, tensor<2x8x2xf32>) -> tensor<2x8x2xf32>
    %39 = moe.linear_grad_input %38, %17 : (tensor<2x8x2xf32>, tensor<2x16xbf16>) -> tensor<2x8x16xbf16>
    %40 = moe.linear_grad_weight %38, %16 : (tensor<2x8x2xf32>, tensor<2x8x16xbf16>) -> tensor<2x16xf32>
    %41 = moe.add %input_grad_0, %39 : tensor<2x8x16xbf16>
    %input_grad_1, %weight_grad_2 = moe.rms_norm_grad %41, %14, %15 {epsilon = 9.99999974E-6 : f32} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<16xbf16>) -> (tensor<2x8x16xbf16>, tensor<16xf32>)
    %42 = moe.add %input_grad, %input_grad_1 : tensor<2x8x16xbf16>
    %43 = moe.linear_grad_input %42, %12 : (tensor<2x8x16xbf16>, tensor<16x16xbf16>) -> tensor<2x8x16xbf16>
    %44 = moe.linear_grad_weight %42, %output : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> tensor<16x16xf32>
    %query_grad, %key_grad, %value_grad = moe.attention_grad %43, %10, %11, %9, %output, %lse {num_heads = 2 : i64, num_kv_heads = 1 : i64} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x8xbf16>, tensor<2x8x8xbf16>, tensor<2x8x16xbf16>, tensor<2x2x8xf32>) -> (tensor<2x8x16xbf16>, tensor<2x8x8xbf16>, tensor<2x8x8xbf16>)
    %45 = moe.rope_grad %key_grad {num_heads = 1 : i64, theta = 1.000000e+04 : f32} : (tensor<2x8x8xbf16>) -> tensor<2x8x8xbf16>
    %46 = moe.rope_grad %query_grad {num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<2x8x16xbf16>) -> tensor<2x8x16xbf16>
    %47 = moe.linear_grad_input %value_grad, %8 : (tensor<2x8x8xbf16>, tensor<8x16xbf16>) -> tensor<2x8x16xbf16>
    %48 = moe.linear_grad_weight %value_grad, %3 : (tensor<2x8x8xbf16>, tensor<2x8x16xbf16>) -> tensor<8x16xf32>
    %49 = moe.linear_grad_input %45, %6 : (tensor<2x8x8xbf16>, tensor<8x16xbf16>) -> tensor<2x8x16xbf16>
    %50 = moe.linear_grad_weight %45, %3 : (tensor<2x8x8xbf16>, tensor<2x8x16xbf16>) -> tensor<8x16xf32>
    %51 = moe.add %47, %49 : tensor<2x8x16xbf16>
    %52 = moe.linear_grad_input %46, %4 : (tensor<2x8x16xbf16>, tensor<16x16xbf16>) -> tensor<2x8x16xbf16>
    %53 = moe.linear_grad_weight %46, %3 : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) -> tensor<16x16xf32>
    %54 = moe.add %51, %52 : tensor<2x8x16xbf16>
    %input_grad_3, %weight_grad_4 = moe.rms_norm_grad %54, %1, %2 {epsilon = 9.99999974E-6 : f32} : (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<16xbf16>) -> (tensor<2x8x16xbf16>, tensor<16xf32>)
    %55 = moe.add %42, %input_grad_3 : tensor<2x8x16xbf16>
    %56 = moe.embedding_grad %55, %arg0 : (tensor<2x8x16xbf16>, tensor<2x8xi32>) -> tensor<32x16xf32>
    %57 = moe.global_norm %56, %weight_grad_4, %53, %50, %48, %44, %weight_grad_2, %40, %w1_grad, %w3_grad, %w2_grad, %weight_grad, %36 : (tensor<32x16xf32>, tensor<16xf32>, tensor<16x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<2x16xf32>, tensor<2x32x16xf32>, tensor<2x32x16xf32>, tensor<2x16x32xf32>, tensor<16xf32>, tensor<32x16xf32>) -> tensor<f32>
    %58 = moe.clip_coefficient %57 {max_norm = 1.000000e+00 : f32} : tensor<f32>
    %59 = moe.learning_rate %arg2 {decay_steps = 10 : i64, min = 3.000000e-04 : f32, peak = 3.000000e-03 : f32, warmup = 2 : i64} : (tensor<i32>) -> tensor<f32>
    moe.adamw_update @model.embed_tokens.weight, @model.embed_tokens.weight.exp_avg, @model.embed_tokens.weight.exp_avg_sq, %56, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.embed_tokens.weight.bf16"} : tensor<32x16xf32>
    moe.adamw_update @model.layers.0.input_layernorm.weight, @model.layers.0.input_layernorm.weight.exp_avg, @model.layers.0.input_layernorm.weight.exp_avg_sq, %weight_grad_4, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32, working_copy = @"model.layers.0.input_layernorm.weight.bf16"} : tensor<16xf32>
    moe.adamw_update @model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.q_proj.weight.exp_avg, @model.layers.0.self_attn.q_proj.weight.exp_avg_sq, %53, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.self_attn.q_proj.weight.bf16"} : tensor<16x16xf32>
    moe.adamw_update @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.k_proj.weight.exp_avg, @model.layers.0.self_attn.k_proj.weight.exp_avg_sq, %50, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.self_attn.k_proj.weight.bf16"} : tensor<8x16xf32>
    moe.adamw_update @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.v_proj.weight.exp_avg, @model.layers.0.self_attn.v_proj.weight.exp_avg_sq, %48, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.self_attn.v_proj.weight.bf16"} : tensor<8x16xf32>
    moe.adamw_update @model.layers.0.self_attn.o_proj.weight, @model.layers.0.self_attn.o_proj.weight.exp_avg, @model.layers.0.self_attn.o_proj.weight.exp_avg_sq, %44, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.self_attn.o_proj.weight.bf16"} : tensor<16x16xf32>
    moe.adamw_update @model.layers.0.post_attention_layernorm.weight, @model.layers.0.post_attention_layernorm.weight.exp_avg, @model.layers.0.post_attention_layernorm.weight.exp_avg_sq, %weight_grad_2, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32, working_copy = @"model.layers.0.post_attention_layernorm.weight.bf16"} : tensor<16xf32>
    moe.adamw_update @model.layers.0.block_sparse_moe.gate.weight, @model.layers.0.block_sparse_moe.gate.weight.exp_avg, @model.layers.0.block_sparse_moe.gate.weight.exp_avg_sq, %40, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.block_sparse_moe.gate.weight.bf16"} : tensor<2x16xf32>
    moe.adamw_update @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight", @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight.exp_avg", @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight.exp_avg_sq", %w1_grad, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.block_sparse_moe.experts.{e}.w1.weight.bf16"} : tensor<2x32x16xf32>
    moe.adamw_update @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight", @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight.exp_avg", @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight.exp_avg_sq", %w3_grad, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.block_sparse_moe.experts.{e}.w3.weight.bf16"} : tensor<2x32x16xf32>
    moe.adamw_update @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight", @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight.exp_avg", @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight.exp_avg_sq", %w2_grad, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.block_sparse_moe.experts.{e}.w2.weight.bf16"} : tensor<2x16x32xf32>
    moe.adamw_update @model.norm.weight, @model.norm.weight.exp_avg, @model.norm.weight.exp_avg_sq, %weight_grad, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32, working_copy = @"model.norm.weight.bf16"} : tensor<16xf32>
    moe.adamw_update @lm_head.weight, @lm_head.weight.exp_avg, @lm_head.weight.exp_avg_sq, %36, %59, %58, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"lm_head.weight.bf16"} : tensor<32x16xf32>
    return %30, %57, %59 : tensor<f32>, tensor<f32>, tensor<f32>
  }
  moe.adamw_config {decay_steps = 10 : i64, lr = 3.000000e-03 : f32, min_lr = 3.000000e-04 : f32, warmup = 2 : i64}
}

