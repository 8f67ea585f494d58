module attributes {moe.precision = {compute = "bf16", grad_reduce = "fp32"}, moe.model = {aux_coef = 0.00999999977 : f32, batch = 8 : i64, capacity_factor = 0.000000e+00 : f32, dense_ffn = 128 : i64, dense_layers = array<i64: 0>, experts = 4 : i64, ffn = 128 : i64, heads = 4 : i64, hidden = 64 : i64, init_std = 2.000000e-02 : f32, kv_heads = 2 : i64, layers = 2 : i64, name = "tiny", rms_eps = 9.99999974E-6 : f32, rope_theta = 1.000000e+04 : f32, seq = 64 : i64, top_k = 2 : i64, vocab = 256 : i64}} {
  moe.param @model.embed_tokens.weight : tensor<256x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.embed_tokens.weight.bf16" : tensor<256x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.embed_tokens.weight}
  moe.param @model.embed_tokens.weight.exp_avg : tensor<256x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.embed_tokens.weight.exp_avg_sq : tensor<256x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.input_layernorm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @"model.layers.0.input_layernorm.weight.bf16" : tensor<64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.input_layernorm.weight}
  moe.param @model.layers.0.input_layernorm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.input_layernorm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.q_proj.weight : tensor<64x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.self_attn.q_proj.weight.bf16" : tensor<64x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.self_attn.q_proj.weight}
  moe.param @model.layers.0.self_attn.q_proj.weight.exp_avg : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.q_proj.weight.exp_avg_sq : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.k_proj.weight : tensor<32x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.self_attn.k_proj.weight.bf16" : tensor<32x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.self_attn.k_proj.weight}
  moe.param @model.layers.0.self_attn.k_proj.weight.exp_avg : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.k_proj.weight.exp_avg_sq : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.v_proj.weight : tensor<32x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.self_attn.v_proj.weight.bf16" : tensor<32x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.self_attn.v_proj.weight}
  moe.param @model.layers.0.self_attn.v_proj.weight.exp_avg : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.v_proj.weight.exp_avg_sq : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.o_proj.weight : tensor<64x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.self_attn.o_proj.weight.bf16" : tensor<64x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.self_attn.o_proj.weight}
  moe.param @model.layers.0.self_attn.o_proj.weight.exp_avg : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.self_attn.o_proj.weight.exp_avg_sq : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.post_attention_layernorm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @"model.layers.0.post_attention_layernorm.weight.bf16" : tensor<64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.post_attention_layernorm.weight}
  moe.param @model.layers.0.post_attention_layernorm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.post_attention_layernorm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.gate_proj.weight : tensor<128x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.mlp.gate_proj.weight.bf16" : tensor<128x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.mlp.gate_proj.weight}
  moe.param @model.layers.0.mlp.gate_proj.weight.exp_avg : tensor<128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.gate_proj.weight.exp_avg_sq : tensor<128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.up_proj.weight : tensor<128x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.mlp.up_proj.weight.bf16" : tensor<128x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.mlp.up_proj.weight}
  moe.param @model.layers.0.mlp.up_proj.weight.exp_avg : tensor<128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.up_proj.weight.exp_avg_sq : tensor<128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.down_proj.weight : tensor<64x128xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.0.mlp.down_proj.weight.bf16" : tensor<64x128xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.0.mlp.down_proj.weight}
  moe.param @model.layers.0.mlp.down_proj.weight.exp_avg : tensor<64x128xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.0.mlp.down_proj.weight.exp_avg_sq : tensor<64x128xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.input_layernorm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @"model.layers.1.input_layernorm.weight.bf16" : tensor<64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.1.input_layernorm.weight}
  moe.param @model.layers.1.input_layernorm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.input_layernorm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.q_proj.weight : tensor<64x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.self_attn.q_proj.weight.bf16" : tensor<64x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.1.self_attn.q_proj.weight}
  moe.param @model.layers.1.self_attn.q_proj.weight.exp_avg : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.q_proj.weight.exp_avg_sq : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.k_proj.weight : tensor<32x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.self_attn.k_proj.weight.bf16" : tensor<32x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.1.self_attn.k_proj.weight}
  moe.param @model.layers.1.self_attn.k_proj.weight.exp_avg : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.k_proj.weight.exp_avg_sq : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.v_proj.weight : tensor<32x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.self_attn.v_proj.weight.bf16" : tensor<32x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.1.self_attn.v_proj.weight}
  moe.param @model.layers.1.self_attn.v_proj.weight.exp_avg : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.v_proj.weight.exp_avg_sq : tensor<32x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.o_proj.weight : tensor<64x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.self_attn.o_proj.weight.bf16" : tensor<64x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.1.self_attn.o_proj.weight}
  moe.param @model.layers.1.self_attn.o_proj.weight.exp_avg : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.self_attn.o_proj.weight.exp_avg_sq : tensor<64x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.post_attention_layernorm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @"model.layers.1.post_attention_layernorm.weight.bf16" : tensor<64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.1.post_attention_layernorm.weight}
  moe.param @model.layers.1.post_attention_layernorm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.post_attention_layernorm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.block_sparse_moe.gate.weight : tensor<4x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.block_sparse_moe.gate.weight.bf16" : tensor<4x64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.layers.1.block_sparse_moe.gate.weight}
  moe.param @model.layers.1.block_sparse_moe.gate.weight.exp_avg : tensor<4x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.layers.1.block_sparse_moe.gate.weight.exp_avg_sq : tensor<4x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight" : tensor<4x128x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.bf16" : tensor<4x128x64xbf16> {kind = #moe.param_kind<working_copy>, master = @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight"}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.exp_avg" : tensor<4x128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.exp_avg_sq" : tensor<4x128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight" : tensor<4x128x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.bf16" : tensor<4x128x64xbf16> {kind = #moe.param_kind<working_copy>, master = @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight"}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.exp_avg" : tensor<4x128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.exp_avg_sq" : tensor<4x128x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight" : tensor<4x64x128xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.bf16" : tensor<4x64x128xbf16> {kind = #moe.param_kind<working_copy>, master = @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight"}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.exp_avg" : tensor<4x64x128xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.exp_avg_sq" : tensor<4x64x128xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.norm.weight : tensor<64xf32> {init = #moe.init<ones>, no_weight_decay}
  moe.param @"model.norm.weight.bf16" : tensor<64xbf16> {kind = #moe.param_kind<working_copy>, master = @model.norm.weight}
  moe.param @model.norm.weight.exp_avg : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @model.norm.weight.exp_avg_sq : tensor<64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @lm_head.weight : tensor<256x64xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
  moe.param @"lm_head.weight.bf16" : tensor<256x64xbf16> {kind = #moe.param_kind<working_copy>, master = @lm_head.weight}
  moe.param @lm_head.weight.exp_avg : tensor<256x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  moe.param @lm_head.weight.exp_avg_sq : tensor<256x64xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
  func.func @train_step(%arg0: tensor<8x64xi32>, %arg1: tensor<8x64xi32>, %arg2: tensor<i32>) -> (tensor<f32>, tensor<f32>, tensor<f32>) {
    %0 = moe.get_param @"model.embed_tokens.weight.bf16" : tensor<256x64xbf16>
    %1 = moe.embedding %arg0, %0 : (tensor<8x64xi32>, tensor<256x64xbf16>) -> tensor<8x64x64xbf16>
    %2 = moe.get_param @"model.layers.0.input_layernorm.weight.bf16" : tensor<64xbf16>
    %3 = moe.rms_norm %1, %2 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<64xbf16>) -> tensor<8x64x64xbf16>
    %4 = moe.get_param @"model.layers.0.self_attn.q_proj.weight.bf16" : tensor<64x64xbf16>
    %5 = moe.linear %3, %4 : (tensor<8x64x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64x64xbf16>
    %6 = moe.get_param @"model.layers.0.self_attn.k_proj.weight.bf16" : tensor<32x64xbf16>
    %7 = moe.linear %3, %6 : (tensor<8x64x64xbf16>, tensor<32x64xbf16>) -> tensor<8x64x32xbf16>
    %8 = moe.get_param @"model.layers.0.self_attn.v_proj.weight.bf16" : tensor<32x64xbf16>
    %9 = moe.linear %3, %8 : (tensor<8x64x64xbf16>, tensor<32x64xbf16>) -> tensor<8x64x32xbf16>
    %10 = moe.rope %5 {num_heads = 4 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x64xbf16>) -> tensor<8x64x64xbf16>
    %11 = moe.rope %7 {num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x32xbf16>) -> tensor<8x64x32xbf16>
    %output, %lse = moe.attention %10, %11, %9 {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<8x64x64xbf16>, tensor<8x64x32xbf16>, tensor<8x64x32xbf16>) -> (tensor<8x64x64xbf16>, tensor<8x4x64xf32>)
    %12 = moe.get_param @"model.layers.0.self_attn.o_proj.weight.bf16" : tensor<64x64xbf16>
    %13 = moe.linear %output, %12 : (tensor<8x64x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64x64xbf16>
    %14 = moe.add %1, %13 : tensor<8x64x64xbf16>
    %15 = moe.get_param @"model.layers.0.post_attention_layernorm.weight.bf16" : tensor<64xbf16>
    %16 = moe.rms_norm %14, %15 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<64xbf16>) -> tensor<8x64x64xbf16>
    %17 = moe.get_param @"model.layers.0.mlp.gate_proj.weight.bf16" : tensor<128x64xbf16>
    %18 = moe.linear %16, %17 : (tensor<8x64x64xbf16>, tensor<128x64xbf16>) -> tensor<8x64x128xbf16>
    %19 = moe.get_param @"model.layers.0.mlp.up_proj.weight.bf16" : tensor<128x64xbf16>
    %20 = moe.linear %16, %19 : (tensor<8x64x64xbf16>, tensor<128x64xbf16>) -> tensor<8x64x128xbf16>
    %21 = moe.swiglu %18, %20 : tensor<8x64x128xbf16>
    %22 = moe.get_param @"model.layers.0.mlp.down_proj.weight.bf16" : tensor<64x128xbf16>
    %23 = moe.linear %21, %22 : (tensor<8x64x128xbf16>, tensor<64x128xbf16>) -> tensor<8x64x64xbf16>
    %24 = moe.add %14, %23 : tensor<8x64x64xbf16>
    %25 = moe.get_param @"model.layers.1.input_layernorm.weight.bf16" : tensor<64xbf16>
    %26 = moe.rms_norm %24, %25 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<64xbf16>) -> tensor<8x64x64xbf16>
    %27 = moe.get_param @"model.layers.1.self_attn.q_proj.weight.bf16" : tensor<64x64xbf16>
    %28 = moe.linear %26, %27 : (tensor<8x64x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64x64xbf16>
    %29 = moe.get_param @"model.layers.1.self_attn.k_proj.weight.bf16" : tensor<32x64xbf16>
    %30 = moe.linear %26, %29 : (tensor<8x64x64xbf16>, tensor<32x64xbf16>) -> tensor<8x64x32xbf16>
    %31 = moe.get_param @"model.layers.1.self_attn.v_proj.weight.bf16" : tensor<32x64xbf16>
    %32 = moe.linear %26, %31 : (tensor<8x64x64xbf16>, tensor<32x64xbf16>) -> tensor<8x64x32xbf16>
    %33 = moe.rope %28 {num_heads = 4 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x64xbf16>) -> tensor<8x64x64xbf16>
    %34 = moe.rope %30 {num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x32xbf16>) -> tensor<8x64x32xbf16>
    %output_0, %lse_1 = moe.attention %33, %34, %32 {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<8x64x64xbf16>, tensor<8x64x32xbf16>, tensor<8x64x32xbf16>) -> (tensor<8x64x64xbf16>, tensor<8x4x64xf32>)
    %35 = moe.get_param @"model.layers.1.self_attn.o_proj.weight.bf16" : tensor<64x64xbf16>
    %36 = moe.linear %output_0, %35 : (tensor<8x64x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64x64xbf16>
    %37 = moe.add %24, %36 : tensor<8x64x64xbf16>
    %38 = moe.get_param @"model.layers.1.post_attention_layernorm.weight.bf16" : tensor<64xbf16>
    %39 = moe.rms_norm %37, %38 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<64xbf16>) -> tensor<8x64x64xbf16>
    %40 = moe.get_param @"model.layers.1.block_sparse_moe.gate.weight.bf16" : tensor<4x64xbf16>
    %41 = moe.linear %39, %40 : (tensor<8x64x64xbf16>, tensor<4x64xbf16>) -> tensor<8x64x4xf32>
    %probs, %weights, %indices = moe.router %41 {top_k = 2 : i64} : (tensor<8x64x4xf32>) -> (tensor<8x64x4xf32>, tensor<8x64x2xf32>, tensor<8x64x2xi32>)
    %42 = moe.get_param @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.bf16" : tensor<4x128x64xbf16>
    %43 = moe.get_param @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.bf16" : tensor<4x128x64xbf16>
    %44 = moe.get_param @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.bf16" : tensor<4x64x128xbf16>
    %45 = moe.experts %39, %weights, %indices, %42, %43, %44 : (tensor<8x64x64xbf16>, tensor<8x64x2xf32>, tensor<8x64x2xi32>, tensor<4x128x64xbf16>, tensor<4x128x64xbf16>, tensor<4x64x128xbf16>) -> tensor<8x64x64xbf16>
    %46 = moe.aux_loss %probs {top_k = 2 : i64} : (tensor<8x64x4xf32>) -> tensor<f32>
    %47 = moe.add %37, %45 : tensor<8x64x64xbf16>
    %48 = moe.get_param @"model.norm.weight.bf16" : tensor<64xbf16>
    %49 = moe.rms_norm %47, %48 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<64xbf16>) -> tensor<8x64x64xbf16>
    %50 = moe.get_param @"lm_head.weight.bf16" : tensor<256x64xbf16>
    %51 = moe.linear %49, %50 : (tensor<8x64x64xbf16>, tensor<256x64xbf16>) -> tensor<8x64x256xbf16>
    %52 = moe.cross_entropy %51, %arg1 : (tensor<8x64x256xbf16>, tensor<8x64xi32>) -> tensor<f32>
    %53 = moe.weighted_sum %52, %46 {coefficients = array<f32: 1.000000e+00, 0.00999999977>} : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %54 = moe.constant 1.000000e+00 : tensor<f32>
    %55 = moe.weighted_sum %54 {coefficients = array<f32: 1.000000e+00>} : (tensor<f32>) -> tensor<f32>
    %56 = moe.weighted_sum %54 {coefficients = array<f32: 0.00999999977>} : (tensor<f32>) -> tensor<f32>
    %57 = moe.cross_entropy_grad %55, %51, %arg1 : (tensor<f32>, tensor<8x64x256xbf16>, tensor<8x64xi32>) -> tensor<8x64x256xbf16>
    %58 = moe.linear_grad_input %57, %50 : (tensor<8x64x256xbf16>, tensor<256x64xbf16>) -> tensor<8x64x64xbf16>
    %59 = moe.linear_grad_weight %57, %49 : (tensor<8x64x256xbf16>, tensor<8x64x64xbf16>) -> tensor<256x64xf32>
    %input_grad, %weight_grad = moe.rms_norm_grad %58, %47, %48 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<64xbf16>) -> (tensor<8x64x64xbf16>, tensor<64xf32>)
    %60 = moe.aux_loss_grad %56, %probs {top_k = 2 : i64} : (tensor<f32>, tensor<8x64x4xf32>) -> tensor<8x64x4xf32>
    %input_grad_2, %weights_grad, %w1_grad, %w3_grad, %w2_grad = moe.experts_grad %input_grad, %39, %weights, %indices, %42, %43, %44 : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<8x64x2xf32>, tensor<8x64x2xi32>, tensor<4x128x64xbf16>, tensor<4x128x64xbf16>, tensor<4x64x128xbf16>) -> (tensor<8x64x64xbf16>, tensor<8x64x2xf32>, tensor<4x128x64xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>)
    %61 = moe.router_grad %weights_grad, %probs, %60 {top_k = 2 : i64} : (tensor<8x64x2xf32>, tensor<8x64x4xf32>, tensor<8x64x4xf32>) -> tensor<8x64x4xf32>
    %62 = moe.linear_grad_input %61, %40 : (tensor<8x64x4xf32>, tensor<4x64xbf16>) -> tensor<8x64x64xbf16>
    %63 = moe.linear_grad_weight %61, %39 : (tensor<8x64x4xf32>, tensor<8x64x64xbf16>) -> tensor<4x64xf32>
    %64 = moe.add %input_grad_2, %62 : tensor<8x64x64xbf16>
    %input_grad_3, %weight_grad_4 = moe.rms_norm_grad %64, %37, %38 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<64xbf16>) -> (tensor<8x64x64xbf16>, tensor<64xf32>)
    %65 = moe.add %input_grad, %input_grad_3 : tensor<8x64x64xbf16>
    %66 = moe.linear_grad_input %65, %35 : (tensor<8x64x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64x64xbf16>
    %67 = moe.linear_grad_weight %65, %output_0 : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>) -> tensor<64x64xf32>
    %query_grad, %key_grad, %value_grad = moe.attention_grad %66, %33, %34, %32, %output_0, %lse_1 {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<8x64x32xbf16>, tensor<8x64x32xbf16>, tensor<8x64x64xbf16>, tensor<8x4x64xf32>) -> (tensor<8x64x64xbf16>, tensor<8x64x32xbf16>, tensor<8x64x32xbf16>)
    %68 = moe.rope_grad %key_grad {num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x32xbf16>) -> tensor<8x64x32xbf16>
    %69 = moe.rope_grad %query_grad {num_heads = 4 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x64xbf16>) -> tensor<8x64x64xbf16>
    %70 = moe.linear_grad_input %value_grad, %31 : (tensor<8x64x32xbf16>, tensor<32x64xbf16>) -> tensor<8x64x64xbf16>
    %71 = moe.linear_grad_weight %value_grad, %26 : (tensor<8x64x32xbf16>, tensor<8x64x64xbf16>) -> tensor<32x64xf32>
    %72 = moe.linear_grad_input %68, %29 : (tensor<8x64x32xbf16>, tensor<32x64xbf16>) -> tensor<8x64x64xbf16>
    %73 = moe.linear_grad_weight %68, %26 : (tensor<8x64x32xbf16>, tensor<8x64x64xbf16>) -> tensor<32x64xf32>
    %74 = moe.add %70, %72 : tensor<8x64x64xbf16>
    %75 = moe.linear_grad_input %69, %27 : (tensor<8x64x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64x64xbf16>
    %76 = moe.linear_grad_weight %69, %26 : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>) -> tensor<64x64xf32>
    %77 = moe.add %74, %75 : tensor<8x64x64xbf16>
    %input_grad_5, %weight_grad_6 = moe.rms_norm_grad %77, %24, %25 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<64xbf16>) -> (tensor<8x64x64xbf16>, tensor<64xf32>)
    %78 = moe.add %65, %input_grad_5 : tensor<8x64x64xbf16>
    %79 = moe.linear_grad_input %78, %22 : (tensor<8x64x64xbf16>, tensor<64x128xbf16>) -> tensor<8x64x128xbf16>
    %80 = moe.linear_grad_weight %78, %21 : (tensor<8x64x64xbf16>, tensor<8x64x128xbf16>) -> tensor<64x128xf32>
    %gate_grad, %up_grad = moe.swiglu_grad %79, %18, %20 : tensor<8x64x128xbf16>
    %81 = moe.linear_grad_input %up_grad, %19 : (tensor<8x64x128xbf16>, tensor<128x64xbf16>) -> tensor<8x64x64xbf16>
    %82 = moe.linear_grad_weight %up_grad, %16 : (tensor<8x64x128xbf16>, tensor<8x64x64xbf16>) -> tensor<128x64xf32>
    %83 = moe.linear_grad_input %gate_grad, %17 : (tensor<8x64x128xbf16>, tensor<128x64xbf16>) -> tensor<8x64x64xbf16>
    %84 = moe.linear_grad_weight %gate_grad, %16 : (tensor<8x64x128xbf16>, tensor<8x64x64xbf16>) -> tensor<128x64xf32>
    %85 = moe.add %81, %83 : tensor<8x64x64xbf16>
    %input_grad_7, %weight_grad_8 = moe.rms_norm_grad %85, %14, %15 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<64xbf16>) -> (tensor<8x64x64xbf16>, tensor<64xf32>)
    %86 = moe.add %78, %input_grad_7 : tensor<8x64x64xbf16>
    %87 = moe.linear_grad_input %86, %12 : (tensor<8x64x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64x64xbf16>
    %88 = moe.linear_grad_weight %86, %output : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>) -> tensor<64x64xf32>
    %query_grad_9, %key_grad_10, %value_grad_11 = moe.attention_grad %87, %10, %11, %9, %output, %lse {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<8x64x32xbf16>, tensor<8x64x32xbf16>, tensor<8x64x64xbf16>, tensor<8x4x64xf32>) -> (tensor<8x64x64xbf16>, tensor<8x64x32xbf16>, tensor<8x64x32xbf16>)
    %89 = moe.rope_grad %key_grad_10 {num_heads = 2 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x32xbf16>) -> tensor<8x64x32xbf16>
    %90 = moe.rope_grad %query_grad_9 {num_heads = 4 : i64, theta = 1.000000e+04 : f32} : (tensor<8x64x64xbf16>) -> tensor<8x64x64xbf16>
    %91 = moe.linear_grad_input %value_grad_11, %8 : (tensor<8x64x32xbf16>, tensor<32x64xbf16>) -> tensor<8x64x64xbf16>
    %92 = moe.linear_grad_weight %value_grad_11, %3 : (tensor<8x64x32xbf16>, tensor<8x64x64xbf16>) -> tensor<32x64xf32>
    %93 = moe.linear_grad_input %89, %6 : (tensor<8x64x32xbf16>, tensor<32x64xbf16>) -> tensor<8x64x64xbf16>
    %94 = moe.linear_grad_weight %89, %3 : (tensor<8x64x32xbf16>, tensor<8x64x64xbf16>) -> tensor<32x64xf32>
    %95 = moe.add %91, %93 : tensor<8x64x64xbf16>
    %96 = moe.linear_grad_input %90, %4 : (tensor<8x64x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64x64xbf16>
    %97 = moe.linear_grad_weight %90, %3 : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>) -> tensor<64x64xf32>
    %98 = moe.add %95, %96 : tensor<8x64x64xbf16>
    %input_grad_12, %weight_grad_13 = moe.rms_norm_grad %98, %1, %2 {epsilon = 9.99999974E-6 : f32} : (tensor<8x64x64xbf16>, tensor<8x64x64xbf16>, tensor<64xbf16>) -> (tensor<8x64x64xbf16>, tensor<64xf32>)
    %99 = moe.add %86, %input_grad_12 : tensor<8x64x64xbf16>
    %100 = moe.embedding_grad %99, %arg0 : (tensor<8x64x64xbf16>, tensor<8x64xi32>) -> tensor<256x64xf32>
    %101 = moe.global_norm %100, %weight_grad_13, %97, %94, %92, %88, %weight_grad_8, %84, %82, %80, %weight_grad_6, %76, %73, %71, %67, %weight_grad_4, %63, %w1_grad, %w3_grad, %w2_grad, %weight_grad, %59 : (tensor<256x64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<128x64xf32>, tensor<128x64xf32>, tensor<64x128xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<4x64xf32>, tensor<4x128x64xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>, tensor<64xf32>, tensor<256x64xf32>) -> tensor<f32>
    %102 = moe.clip_coefficient %101 {max_norm = 1.000000e+00 : f32} : tensor<f32>
    %103 = moe.learning_rate %arg2 {decay_steps = 300 : i64, min = 3.000000e-04 : f32, peak = 3.000000e-03 : f32, warmup = 20 : i64} : (tensor<i32>) -> tensor<f32>
    moe.adamw_update @model.embed_tokens.weight, @model.embed_tokens.weight.exp_avg, @model.embed_tokens.weight.exp_avg_sq, %100, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.embed_tokens.weight.bf16"} : tensor<256x64xf32>
    moe.adamw_update @model.layers.0.input_layernorm.weight, @model.layers.0.input_layernorm.weight.exp_avg, @model.layers.0.input_layernorm.weight.exp_avg_sq, %weight_grad_13, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32, working_copy = @"model.layers.0.input_layernorm.weight.bf16"} : tensor<64xf32>
    moe.adamw_update @model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.q_proj.weight.exp_avg, @model.layers.0.self_attn.q_proj.weight.exp_avg_sq, %97, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.self_attn.q_proj.weight.bf16"} : tensor<64x64xf32>
    moe.adamw_update @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.k_proj.weight.exp_avg, @model.layers.0.self_attn.k_proj.weight.exp_avg_sq, %94, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.self_attn.k_proj.weight.bf16"} : tensor<32x64xf32>
    moe.adamw_update @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.v_proj.weight.exp_avg, @model.layers.0.self_attn.v_proj.weight.exp_avg_sq, %92, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.self_attn.v_proj.weight.bf16"} : tensor<32x64xf32>
    moe.adamw_update @model.layers.0.self_attn.o_proj.weight, @model.layers.0.self_attn.o_proj.weight.exp_avg, @model.layers.0.self_attn.o_proj.weight.exp_avg_sq, %88, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.self_attn.o_proj.weight.bf16"} : tensor<64x64xf32>
    moe.adamw_update @model.layers.0.post_attention_layernorm.weight, @model.layers.0.post_attention_layernorm.weight.exp_avg, @model.layers.0.post_attention_layernorm.weight.exp_avg_sq, %weight_grad_8, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32, working_copy = @"model.layers.0.post_attention_layernorm.weight.bf16"} : tensor<64xf32>
    moe.adamw_update @model.layers.0.mlp.gate_proj.weight, @model.layers.0.mlp.gate_proj.weight.exp_avg, @model.layers.0.mlp.gate_proj.weight.exp_avg_sq, %84, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.mlp.gate_proj.weight.bf16"} : tensor<128x64xf32>
    moe.adamw_update @model.layers.0.mlp.up_proj.weight, @model.layers.0.mlp.up_proj.weight.exp_avg, @model.layers.0.mlp.up_proj.weight.exp_avg_sq, %82, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.mlp.up_proj.weight.bf16"} : tensor<128x64xf32>
    moe.adamw_update @model.layers.0.mlp.down_proj.weight, @model.layers.0.mlp.down_proj.weight.exp_avg, @model.layers.0.mlp.down_proj.weight.exp_avg_sq, %80, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.0.mlp.down_proj.weight.bf16"} : tensor<64x128xf32>
    moe.adamw_update @model.layers.1.input_layernorm.weight, @model.layers.1.input_layernorm.weight.exp_avg, @model.layers.1.input_layernorm.weight.exp_avg_sq, %weight_grad_6, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32, working_copy = @"model.layers.1.input_layernorm.weight.bf16"} : tensor<64xf32>
    moe.adamw_update @model.layers.1.self_attn.q_proj.weight, @model.layers.1.self_attn.q_proj.weight.exp_avg, @model.layers.1.self_attn.q_proj.weight.exp_avg_sq, %76, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.1.self_attn.q_proj.weight.bf16"} : tensor<64x64xf32>
    moe.adamw_update @model.layers.1.self_attn.k_proj.weight, @model.layers.1.self_attn.k_proj.weight.exp_avg, @model.layers.1.self_attn.k_proj.weight.exp_avg_sq, %73, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.1.self_attn.k_proj.weight.bf16"} : tensor<32x64xf32>
    moe.adamw_update @model.layers.1.self_attn.v_proj.weight, @model.layers.1.self_attn.v_proj.weight.exp_avg, @model.layers.1.self_attn.v_proj.weight.exp_avg_sq, %71, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.1.self_attn.v_proj.weight.bf16"} : tensor<32x64xf32>
    moe.adamw_update @model.layers.1.self_attn.o_proj.weight, @model.layers.1.self_attn.o_proj.weight.exp_avg, @model.layers.1.self_attn.o_proj.weight.exp_avg_sq, %67, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.1.self_attn.o_proj.weight.bf16"} : tensor<64x64xf32>
    moe.adamw_update @model.layers.1.post_attention_layernorm.weight, @model.layers.1.post_attention_layernorm.weight.exp_avg, @model.layers.1.post_attention_layernorm.weight.exp_avg_sq, %weight_grad_4, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32, working_copy = @"model.layers.1.post_attention_layernorm.weight.bf16"} : tensor<64xf32>
    moe.adamw_update @model.layers.1.block_sparse_moe.gate.weight, @model.layers.1.block_sparse_moe.gate.weight.exp_avg, @model.layers.1.block_sparse_moe.gate.weight.exp_avg_sq, %63, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.1.block_sparse_moe.gate.weight.bf16"} : tensor<4x64xf32>
    moe.adamw_update @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight", @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.exp_avg", @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.exp_avg_sq", %w1_grad, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.1.block_sparse_moe.experts.{e}.w1.weight.bf16"} : tensor<4x128x64xf32>
    moe.adamw_update @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight", @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.exp_avg", @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.exp_avg_sq", %w3_grad, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.1.block_sparse_moe.experts.{e}.w3.weight.bf16"} : tensor<4x128x64xf32>
    moe.adamw_update @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight", @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.exp_avg", @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.exp_avg_sq", %w2_grad, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"model.layers.1.block_sparse_moe.experts.{e}.w2.weight.bf16"} : tensor<4x64x128xf32>
    moe.adamw_update @model.norm.weight, @model.norm.weight.exp_avg, @model.norm.weight.exp_avg_sq, %weight_grad, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 0.000000e+00 : f32, working_copy = @"model.norm.weight.bf16"} : tensor<64xf32>
    moe.adamw_update @lm_head.weight, @lm_head.weight.exp_avg, @lm_head.weight.exp_avg_sq, %59, %103, %102, %arg2 {beta1 = 0.899999976 : f32, beta2 = 0.949999988 : f32, eps = 9.99999993E-9 : f32, weight_decay = 1.000000e-01 : f32, working_copy = @"lm_head.weight.bf16"} : tensor<256x64xf32>
    return %53, %101, %103 : tensor<f32>, tensor<f32>, tensor<f32>
  }
  moe.adamw_config {decay_steps = 300 : i64, lr = 3.000000e-03 : f32, min_lr = 3.000000e-04 : f32, warmup = 20 : i64}
}


