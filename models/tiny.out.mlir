module attributes {moe.model = {aux_coef = 0.00999999977 : f32, batch = 8 : i64, capacity_factor = 0.000000e+00 : f32, dense_ffn = 128 : i64, dense_layers = array<i64: 0>, experts = 4 : i64, ffn = 128 : i64, heads = 4 : i64, hidden = 64 : i64, init_std = 2.000000e-02 : f32, kv_heads = 2 : i64, layers = 2 : i64, name = "tiny", rms_eps = 9.99999974E-6 : f32, rope_theta = 1.000000e+04 : f32, seq = 64 : i64, top_k = 2 : i64, vocab = 256 : i64}} {
  moe.param @model.embed_tokens.weight : tensor<256x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.embed_tokens.weight.exp_avg : tensor<256x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.embed_tokens.weight.exp_avg_sq : tensor<256x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.input_layernorm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @model.layers.0.input_layernorm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.input_layernorm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.q_proj.weight : tensor<64x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.0.self_attn.q_proj.weight.exp_avg : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.q_proj.weight.exp_avg_sq : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.k_proj.weight : tensor<32x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.0.self_attn.k_proj.weight.exp_avg : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.k_proj.weight.exp_avg_sq : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.v_proj.weight : tensor<32x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.0.self_attn.v_proj.weight.exp_avg : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.v_proj.weight.exp_avg_sq : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.o_proj.weight : tensor<64x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.0.self_attn.o_proj.weight.exp_avg : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.o_proj.weight.exp_avg_sq : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.post_attention_layernorm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @model.layers.0.post_attention_layernorm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.post_attention_layernorm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.gate_proj.weight : tensor<128x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.0.mlp.gate_proj.weight.exp_avg : tensor<128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.gate_proj.weight.exp_avg_sq : tensor<128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.up_proj.weight : tensor<128x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.0.mlp.up_proj.weight.exp_avg : tensor<128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.up_proj.weight.exp_avg_sq : tensor<128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.down_proj.weight : tensor<64x128xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.0.mlp.down_proj.weight.exp_avg : tensor<64x128xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.down_proj.weight.exp_avg_sq : tensor<64x128xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.input_layernorm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @model.layers.1.input_layernorm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.input_layernorm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.q_proj.weight : tensor<64x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.1.self_attn.q_proj.weight.exp_avg : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.q_proj.weight.exp_avg_sq : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.k_proj.weight : tensor<32x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.1.self_attn.k_proj.weight.exp_avg : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.k_proj.weight.exp_avg_sq : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.v_proj.weight : tensor<32x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.1.self_attn.v_proj.weight.exp_avg : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.v_proj.weight.exp_avg_sq : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.o_proj.weight : tensor<64x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.1.self_attn.o_proj.weight.exp_avg : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.o_proj.weight.exp_avg_sq : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.post_attention_layernorm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @model.layers.1.post_attention_layernorm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.post_attention_layernorm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.block_sparse_moe.gate.weight : tensor<4x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @model.layers.1.block_sparse_moe.gate.weight.exp_avg : tensor<4x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.block_sparse_moe.gate.weight.exp_avg_sq : tensor<4x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight" : tensor<4x128x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.exp_avg" : tensor<4x128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.exp_avg_sq" : tensor<4x128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight" : tensor<4x128x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.exp_avg" : tensor<4x128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.exp_avg_sq" : tensor<4x128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight" : tensor<4x64x128xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.exp_avg" : tensor<4x64x128xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.exp_avg_sq" : tensor<4x64x128xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.norm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @model.norm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.norm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @lm_head.weight : tensor<256x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @lm_head.weight.exp_avg : tensor<256x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @lm_head.weight.exp_avg_sq : tensor<256x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.block_sparse_moe.experts.fp8_amax_history : tensor<4x9x17xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<fp8_history>, no_weight_decay}
  func.func @train_step(%arg0: tensor<8x64xi32>, %arg1: tensor<8x64xi32>, %arg2: tensor<i32>) -> (tensor<f32>, tensor<f32>, tensor<f32>) attributes {moe.arena_bytes = 4030592 : i64, moe.peak_live_bytes = 3964940 : i64} {
    %0 = moe.get_param @model.embed_tokens.weight : tensor<256x64xf32>
    %1 = moe.embedding %arg0, %0 {moe.offsets = array<i64: 1835008>} : (tensor<8x64xi32>, tensor<256x64xf32>) -> tensor<8x64x64xf32>
    %2 = moe.get_param @model.layers.0.input_layernorm.weight : tensor<64xf32>
    %3 = moe.rms_norm %1, %2 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 1966080>} : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
    %4 = moe.get_param @model.layers.0.self_attn.q_proj.weight : tensor<64x64xf32>
    %5 = moe.linear %3, %4 {moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %6 = moe.get_param @model.layers.0.self_attn.k_proj.weight : tensor<32x64xf32>
    %7 = moe.linear %3, %6 {moe.offsets = array<i64: 131072>} : (tensor<8x64x64xf32>, tensor<32x64xf32>) -> tensor<8x64x32xf32>
    %8 = moe.get_param @model.layers.0.self_attn.v_proj.weight : tensor<32x64xf32>
    %9 = moe.linear %3, %8 {moe.offsets = array<i64: 3670016>} : (tensor<8x64x64xf32>, tensor<32x64xf32>) -> tensor<8x64x32xf32>
    %10 = moe.rope %5 {moe.offsets = array<i64: 2097152>, num_heads = 4 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
    %11 = moe.rope %7 {moe.offsets = array<i64: 3735552>, num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x32xf32>) -> tensor<8x64x32xf32>
    %output, %lse = moe.attention %10, %11, %9 {moe.offsets = array<i64: 2228224, 3997696>, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>) -> (tensor<8x64x64xf32>, tensor<8x4x64xf32>)
    %12 = moe.get_param @model.layers.0.self_attn.o_proj.weight : tensor<64x64xf32>
    %13 = moe.linear %output, %12 {moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %14 = moe.add %1, %13 {moe.offsets = array<i64: 2359296>} : tensor<8x64x64xf32>
    %15 = moe.get_param @model.layers.0.post_attention_layernorm.weight : tensor<64xf32>
    %16 = moe.rms_norm %14, %15 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 2490368>} : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
    %17 = moe.get_param @model.layers.0.mlp.gate_proj.weight : tensor<128x64xf32>
    %18 = moe.linear %16, %17 {moe.offsets = array<i64: 1048576>} : (tensor<8x64x64xf32>, tensor<128x64xf32>) -> tensor<8x64x128xf32>
    %19 = moe.get_param @model.layers.0.mlp.up_proj.weight : tensor<128x64xf32>
    %20 = moe.linear %16, %19 {moe.offsets = array<i64: 1310720>} : (tensor<8x64x64xf32>, tensor<128x64xf32>) -> tensor<8x64x128xf32>
    %21 = moe.swiglu %18, %20 {moe.offsets = array<i64: 1572864>} : tensor<8x64x128xf32>
    %22 = moe.get_param @model.layers.0.mlp.down_proj.weight : tensor<64x128xf32>
    %23 = moe.linear %21, %22 {moe.offsets = array<i64: 0>} : (tensor<8x64x128xf32>, tensor<64x128xf32>) -> tensor<8x64x64xf32>
    %24 = moe.add %14, %23 {moe.offsets = array<i64: 2621440>} : tensor<8x64x64xf32>
    %25 = moe.get_param @model.layers.1.input_layernorm.weight : tensor<64xf32>
    %26 = moe.rms_norm %24, %25 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 2752512>} : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
    %27 = moe.get_param @model.layers.1.self_attn.q_proj.weight : tensor<64x64xf32>
    %28 = moe.linear %26, %27 {moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %29 = moe.get_param @model.layers.1.self_attn.k_proj.weight : tensor<32x64xf32>
    %30 = moe.linear %26, %29 {moe.offsets = array<i64: 131072>} : (tensor<8x64x64xf32>, tensor<32x64xf32>) -> tensor<8x64x32xf32>
    %31 = moe.get_param @model.layers.1.self_attn.v_proj.weight : tensor<32x64xf32>
    %32 = moe.linear %26, %31 {moe.offsets = array<i64: 3801088>} : (tensor<8x64x64xf32>, tensor<32x64xf32>) -> tensor<8x64x32xf32>
    %33 = moe.rope %28 {moe.offsets = array<i64: 2883584>, num_heads = 4 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
    %34 = moe.rope %30 {moe.offsets = array<i64: 3866624>, num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x32xf32>) -> tensor<8x64x32xf32>
    %output_0, %lse_1 = moe.attention %33, %34, %32 {moe.offsets = array<i64: 3014656, 4005888>, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>) -> (tensor<8x64x64xf32>, tensor<8x4x64xf32>)
    %35 = moe.get_param @model.layers.1.self_attn.o_proj.weight : tensor<64x64xf32>
    %36 = moe.linear %output_0, %35 {moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %37 = moe.add %24, %36 {moe.offsets = array<i64: 3145728>} : tensor<8x64x64xf32>
    %38 = moe.get_param @model.layers.1.post_attention_layernorm.weight : tensor<64xf32>
    %39 = moe.rms_norm %37, %38 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 3276800>} : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
    %40 = moe.get_param @model.layers.1.block_sparse_moe.gate.weight : tensor<4x64xf32>
    %41 = moe.linear %39, %40 {moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<4x64xf32>) -> tensor<8x64x4xf32>
    %probs, %weights, %indices = moe.router %41 {moe.offsets = array<i64: 4014080, 4022272, 4026368>, top_k = 2 : i64} : (tensor<8x64x4xf32>) -> (tensor<8x64x4xf32>, tensor<8x64x2xf32>, tensor<8x64x2xi32>)
    %42 = moe.get_param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight" : tensor<4x128x64xf32>
    %43 = moe.get_param @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight" : tensor<4x128x64xf32>
    %44 = moe.get_param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight" : tensor<4x64x128xf32>
    %45 = moe.experts %39, %weights, %indices, %42, %43, %44 {fp8 = #moe.fp8<delayed>, fp8_history = @model.layers.1.block_sparse_moe.experts.fp8_amax_history, moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<8x64x2xf32>, tensor<8x64x2xi32>, tensor<4x128x64xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>) -> tensor<8x64x64xf32>
    %46 = moe.aux_loss %probs {moe.offsets = array<i64: 524288>, top_k = 2 : i64} : (tensor<8x64x4xf32>) -> tensor<f32>
    %47 = moe.add %37, %45 {moe.offsets = array<i64: 3407872>} : tensor<8x64x64xf32>
    %48 = moe.get_param @model.norm.weight : tensor<64xf32>
    %49 = moe.rms_norm %47, %48 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 3538944>} : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
    %50 = moe.get_param @lm_head.weight : tensor<256x64xf32>
    %51 = moe.linear %49, %50 {moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<256x64xf32>) -> tensor<8x64x256xf32>
    %52 = moe.cross_entropy %51, %arg1 {moe.offsets = array<i64: 524352>} : (tensor<8x64x256xf32>, tensor<8x64xi32>) -> tensor<f32>
    %53 = moe.weighted_sum %52, %46 {coefficients = array<f32: 1.000000e+00, 0.00999999977>, moe.offsets = array<i64: 4030464>} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %54 = moe.constant 1.000000e+00 {moe.offsets = array<i64: 524288>} : tensor<f32>
    %55 = moe.weighted_sum %54 {coefficients = array<f32: 1.000000e+00>, moe.offsets = array<i64: 3932160>} : (tensor<f32>) -> tensor<f32>
    %56 = moe.weighted_sum %54 {coefficients = array<f32: 0.00999999977>, moe.offsets = array<i64: 4030528>} : (tensor<f32>) -> tensor<f32>
    %57 = moe.cross_entropy_grad %55, %51, %arg1 {moe.offsets = array<i64: 524288>} : (tensor<f32>, tensor<8x64x256xf32>, tensor<8x64xi32>) -> tensor<8x64x256xf32>
    %58 = moe.linear_grad_input %57, %50 {moe.offsets = array<i64: 0>} : (tensor<8x64x256xf32>, tensor<256x64xf32>) -> tensor<8x64x64xf32>
    %59 = moe.linear_grad_weight %57, %49 {moe.offsets = array<i64: 3932160>} : (tensor<8x64x256xf32>, tensor<8x64x64xf32>) -> tensor<256x64xf32>
    %input_grad, %weight_grad = moe.rms_norm_grad %58, %47, %48 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 131072, 3539968>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<64xf32>) -> (tensor<8x64x64xf32>, tensor<64xf32>)
    %60 = moe.aux_loss_grad %56, %probs {moe.offsets = array<i64: 262144>, top_k = 2 : i64} : (tensor<f32>, tensor<8x64x4xf32>) -> tensor<8x64x4xf32>
    %input_grad_2, %weights_grad, %w1_grad, %w3_grad, %w2_grad = moe.experts_grad %input_grad, %39, %weights, %indices, %42, %43, %44 {fp8 = #moe.fp8<delayed>, fp8_history = @model.layers.1.block_sparse_moe.experts.fp8_amax_history, moe.offsets = array<i64: 0, 270336, 786432, 917504, 3407872>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x2xf32>, tensor<8x64x2xi32>, tensor<4x128x64xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>) -> (tensor<8x64x64xf32>, tensor<8x64x2xf32>, tensor<4x128x64xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>)
    %61 = moe.router_grad %weights_grad, %probs, %60 {moe.offsets = array<i64: 393216>, top_k = 2 : i64} : (tensor<8x64x2xf32>, tensor<8x64x4xf32>, tensor<8x64x4xf32>) -> tensor<8x64x4xf32>
    %62 = moe.linear_grad_input %61, %40 {moe.offsets = array<i64: 262144>} : (tensor<8x64x4xf32>, tensor<4x64xf32>) -> tensor<8x64x64xf32>
    %63 = moe.linear_grad_weight %61, %39 {moe.offsets = array<i64: 3538944>} : (tensor<8x64x4xf32>, tensor<8x64x64xf32>) -> tensor<4x64xf32>
    %64 = moe.add %input_grad_2, %62 {moe.offsets = array<i64: 393216>} : tensor<8x64x64xf32>
    %input_grad_3, %weight_grad_4 = moe.rms_norm_grad %64, %37, %38 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 0, 3276800>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<64xf32>) -> (tensor<8x64x64xf32>, tensor<64xf32>)
    %65 = moe.add %input_grad, %input_grad_3 {moe.offsets = array<i64: 262144>} : tensor<8x64x64xf32>
    %66 = moe.linear_grad_input %65, %35 {moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %67 = moe.linear_grad_weight %65, %output_0 {moe.offsets = array<i64: 3145728>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>) -> tensor<64x64xf32>
    %query_grad, %key_grad, %value_grad = moe.attention_grad %66, %33, %34, %32, %output_0, %lse_1 {moe.offsets = array<i64: 131072, 393216, 458752>, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>, tensor<8x64x64xf32>, tensor<8x4x64xf32>) -> (tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>)
    %68 = moe.rope_grad %key_grad {moe.offsets = array<i64: 524288>, num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x32xf32>) -> tensor<8x64x32xf32>
    %69 = moe.rope_grad %query_grad {moe.offsets = array<i64: 0>, num_heads = 4 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
    %70 = moe.linear_grad_input %value_grad, %31 {moe.offsets = array<i64: 131072>} : (tensor<8x64x32xf32>, tensor<32x64xf32>) -> tensor<8x64x64xf32>
    %71 = moe.linear_grad_weight %value_grad, %26 {moe.offsets = array<i64: 2899968>} : (tensor<8x64x32xf32>, tensor<8x64x64xf32>) -> tensor<32x64xf32>
    %72 = moe.linear_grad_input %68, %29 {moe.offsets = array<i64: 393216>} : (tensor<8x64x32xf32>, tensor<32x64xf32>) -> tensor<8x64x64xf32>
    %73 = moe.linear_grad_weight %68, %26 {moe.offsets = array<i64: 2908160>} : (tensor<8x64x32xf32>, tensor<8x64x64xf32>) -> tensor<32x64xf32>
    %74 = moe.add %70, %72 {moe.offsets = array<i64: 524288>} : tensor<8x64x64xf32>
    %75 = moe.linear_grad_input %69, %27 {moe.offsets = array<i64: 131072>} : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %76 = moe.linear_grad_weight %69, %26 {moe.offsets = array<i64: 2883584>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>) -> tensor<64x64xf32>
    %77 = moe.add %74, %75 {moe.offsets = array<i64: 0>} : tensor<8x64x64xf32>
    %input_grad_5, %weight_grad_6 = moe.rms_norm_grad %77, %24, %25 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 131072, 2785280>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<64xf32>) -> (tensor<8x64x64xf32>, tensor<64xf32>)
    %78 = moe.add %65, %input_grad_5 {moe.offsets = array<i64: 2621440>} : tensor<8x64x64xf32>
    %79 = moe.linear_grad_input %78, %22 {moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<64x128xf32>) -> tensor<8x64x128xf32>
    %80 = moe.linear_grad_weight %78, %21 {moe.offsets = array<i64: 2752512>} : (tensor<8x64x64xf32>, tensor<8x64x128xf32>) -> tensor<64x128xf32>
    %gate_grad, %up_grad = moe.swiglu_grad %79, %18, %20 {moe.offsets = array<i64: 262144, 524288>} : tensor<8x64x128xf32>
    %81 = moe.linear_grad_input %up_grad, %19 {moe.offsets = array<i64: 0>} : (tensor<8x64x128xf32>, tensor<128x64xf32>) -> tensor<8x64x64xf32>
    %82 = moe.linear_grad_weight %up_grad, %16 {moe.offsets = array<i64: 1048576>} : (tensor<8x64x128xf32>, tensor<8x64x64xf32>) -> tensor<128x64xf32>
    %83 = moe.linear_grad_input %gate_grad, %17 {moe.offsets = array<i64: 131072>} : (tensor<8x64x128xf32>, tensor<128x64xf32>) -> tensor<8x64x64xf32>
    %84 = moe.linear_grad_weight %gate_grad, %16 {moe.offsets = array<i64: 655360>} : (tensor<8x64x128xf32>, tensor<8x64x64xf32>) -> tensor<128x64xf32>
    %85 = moe.add %81, %83 {moe.offsets = array<i64: 262144>} : tensor<8x64x64xf32>
    %input_grad_7, %weight_grad_8 = moe.rms_norm_grad %85, %14, %15 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 0, 720896>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<64xf32>) -> (tensor<8x64x64xf32>, tensor<64xf32>)
    %86 = moe.add %78, %input_grad_7 {moe.offsets = array<i64: 131072>} : tensor<8x64x64xf32>
    %87 = moe.linear_grad_input %86, %12 {moe.offsets = array<i64: 0>} : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %88 = moe.linear_grad_weight %86, %output {moe.offsets = array<i64: 688128>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>) -> tensor<64x64xf32>
    %query_grad_9, %key_grad_10, %value_grad_11 = moe.attention_grad %87, %10, %11, %9, %output, %lse {moe.offsets = array<i64: 262144, 393216, 458752>, num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>, tensor<8x64x64xf32>, tensor<8x4x64xf32>) -> (tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>)
    %89 = moe.rope_grad %key_grad_10 {moe.offsets = array<i64: 524288>, num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x32xf32>) -> tensor<8x64x32xf32>
    %90 = moe.rope_grad %query_grad_9 {moe.offsets = array<i64: 0>, num_heads = 4 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
    %91 = moe.linear_grad_input %value_grad_11, %8 {moe.offsets = array<i64: 262144>} : (tensor<8x64x32xf32>, tensor<32x64xf32>) -> tensor<8x64x64xf32>
    %92 = moe.linear_grad_weight %value_grad_11, %3 {moe.offsets = array<i64: 704512>} : (tensor<8x64x32xf32>, tensor<8x64x64xf32>) -> tensor<32x64xf32>
    %93 = moe.linear_grad_input %89, %6 {moe.offsets = array<i64: 393216>} : (tensor<8x64x32xf32>, tensor<32x64xf32>) -> tensor<8x64x64xf32>
    %94 = moe.linear_grad_weight %89, %3 {moe.offsets = array<i64: 712704>} : (tensor<8x64x32xf32>, tensor<8x64x64xf32>) -> tensor<32x64xf32>
    %95 = moe.add %91, %93 {moe.offsets = array<i64: 524288>} : tensor<8x64x64xf32>
    %96 = moe.linear_grad_input %90, %4 {moe.offsets = array<i64: 262144>} : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %97 = moe.linear_grad_weight %90, %3 {moe.offsets = array<i64: 393216>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>) -> tensor<64x64xf32>
    %98 = moe.add %95, %96 {moe.offsets = array<i64: 0>} : tensor<8x64x64xf32>
    %input_grad_12, %weight_grad_13 = moe.rms_norm_grad %98, %1, %2 {epsilon = 9.99999974E-6 : f32, moe.offsets = array<i64: 262144, 409600>} : (tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<64xf32>) -> (tensor<8x64x64xf32>, tensor<64xf32>)
    %99 = moe.add %86, %input_grad_12 {moe.offsets = array<i64: 0>} : tensor<8x64x64xf32>
    %100 = moe.embedding_grad %99, %arg0 {moe.offsets = array<i64: 131072>} : (tensor<8x64x64xf32>, tensor<8x64xi32>) -> tensor<256x64xf32>
    %101 = moe.global_norm %100, %weight_grad_13, %97, %94, %92, %88, %weight_grad_8, %84, %82, %80, %weight_grad_6, %76, %73, %71, %67, %weight_grad_4, %63, %w1_grad, %w3_grad, %w2_grad, %weight_grad, %59 {moe.offsets = array<i64: 0>} : (tensor<256x64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<4x64xf32>, tensor<4x128x64xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>, tensor<64xf32>, tensor<256x64xf32>) -> tensor<f32>
    %102 = moe.clip_coefficient %101 {max_norm = 1.000000e+00 : f32, moe.offsets = array<i64: 64>} : tensor<f32>
    %103 = moe.learning_rate %arg2 {decay_steps = 300 : i64, min = 3.000000e-04 : f32, moe.offsets = array<i64: 128>, peak = 3.000000e-03 : f32, warmup = 20 : i64} : (tensor<i32>) -> tensor<f32>
    moe.adamw_update @model.embed_tokens.weight, @model.embed_tokens.weight.exp_avg, @model.embed_tokens.weight.exp_avg_sq, %100, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<256x64xf32>
    moe.adamw_update @model.layers.0.input_layernorm.weight, @model.layers.0.input_layernorm.weight.exp_avg, @model.layers.0.input_layernorm.weight.exp_avg_sq, %weight_grad_13, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32} : tensor<64xf32>
    moe.adamw_update @model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.q_proj.weight.exp_avg, @model.layers.0.self_attn.q_proj.weight.exp_avg_sq, %97, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<64x64xf32>
    moe.adamw_update @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.k_proj.weight.exp_avg, @model.layers.0.self_attn.k_proj.weight.exp_avg_sq, %94, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<32x64xf32>
    moe.adamw_update @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.v_proj.weight.exp_avg, @model.layers.0.self_attn.v_proj.weight.exp_avg_sq, %92, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<32x64xf32>
    moe.adamw_update @model.layers.0.self_attn.o_proj.weight, @model.layers.0.self_attn.o_proj.weight.exp_avg, @model.layers.0.self_attn.o_proj.weight.exp_avg_sq, %88, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<64x64xf32>
    moe.adamw_update @model.layers.0.post_attention_layernorm.weight, @model.layers.0.post_attention_layernorm.weight.exp_avg, @model.layers.0.post_attention_layernorm.weight.exp_avg_sq, %weight_grad_8, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32} : tensor<64xf32>
    moe.adamw_update @model.layers.0.mlp.gate_proj.weight, @model.layers.0.mlp.gate_proj.weight.exp_avg, @model.layers.0.mlp.gate_proj.weight.exp_avg_sq, %84, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<128x64xf32>
    moe.adamw_update @model.layers.0.mlp.up_proj.weight, @model.layers.0.mlp.up_proj.weight.exp_avg, @model.layers.0.mlp.up_proj.weight.exp_avg_sq, %82, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<128x64xf32>
    moe.adamw_update @model.layers.0.mlp.down_proj.weight, @model.layers.0.mlp.down_proj.weight.exp_avg, @model.layers.0.mlp.down_proj.weight.exp_avg_sq, %80, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<64x128xf32>
    moe.adamw_update @model.layers.1.input_layernorm.weight, @model.layers.1.input_layernorm.weight.exp_avg, @model.layers.1.input_layernorm.weight.exp_avg_sq, %weight_grad_6, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32} : tensor<64xf32>
    moe.adamw_update @model.layers.1.self_attn.q_proj.weight, @model.layers.1.self_attn.q_proj.weight.exp_avg, @model.layers.1.self_attn.q_proj.weight.exp_avg_sq, %76, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<64x64xf32>
    moe.adamw_update @model.layers.1.self_attn.k_proj.weight, @model.layers.1.self_attn.k_proj.weight.exp_avg, @model.layers.1.self_attn.k_proj.weight.exp_avg_sq, %73, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<32x64xf32>
    moe.adamw_update @model.layers.1.self_attn.v_proj.weight, @model.layers.1.self_attn.v_proj.weight.exp_avg, @model.layers.1.self_attn.v_proj.weight.exp_avg_sq, %71, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<32x64xf32>
    moe.adamw_update @model.layers.1.self_attn.o_proj.weight, @model.layers.1.self_attn.o_proj.weight.exp_avg, @model.layers.1.self_attn.o_proj.weight.exp_avg_sq, %67, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<64x64xf32>
    moe.adamw_update @model.layers.1.post_attention_layernorm.weight, @model.layers.1.post_attention_layernorm.weight.exp_avg, @model.layers.1.post_attention_layernorm.weight.exp_avg_sq, %weight_grad_4, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32} : tensor<64xf32>
    moe.adamw_update @model.layers.1.block_sparse_moe.gate.weight, @model.layers.1.block_sparse_moe.gate.weight.exp_avg, @model.layers.1.block_sparse_moe.gate.weight.exp_avg_sq, %63, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<4x64xf32>
    moe.adamw_update @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight", @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.exp_avg", @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.exp_avg_sq", %w1_grad, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<4x128x64xf32>
    moe.adamw_update @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight", @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.exp_avg", @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.exp_avg_sq", %w3_grad, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<4x128x64xf32>
    moe.adamw_update @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight", @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.exp_avg", @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.exp_avg_sq", %w2_grad, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<4x64x128xf32>
    moe.adamw_update @model.norm.weight, @model.norm.weight.exp_avg, @model.norm.weight.exp_avg_sq, %weight_grad, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32} : tensor<64xf32>
    moe.adamw_update @lm_head.weight, @lm_head.weight.exp_avg, @lm_head.weight.exp_avg_sq, %59, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32} : tensor<256x64xf32>
    moe.fp8_amax_update @model.layers.1.block_sparse_moe.experts.fp8_amax_history
    return %53, %101, %103 : tensor<f32>, tensor<f32>, tensor<f32>
  }
  moe.adamw_config {decay_steps = 300 : i64, lr = 3.000000e-03 : f32, min_lr = 3.000000e-04 : f32, warmup = 20 : i64}
}
