// RUN: moe-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{expected vocab > 0, got 0}}
moe.transformer @m {vocab = 0, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected dense_ffn > 0, got -4}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, dense_ffn = -4}

// -----

// expected-error @+1 {{expected head_dim > 0, got 0}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, head_dim = 0}

// -----

// expected-error @+1 {{expected an even head dimension for rope, got 3}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, head_dim = 3}

// -----

// expected-error @+1 {{expected heads * head_dim <= 65536, got 2 * 32770}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, head_dim = 32770}

// -----

// expected-error @+1 {{expected aux_coef = 0 with sigmoid scoring: the load-balancing loss counts the top_k of the scores, which is not this router's selection; got 0.01}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, scoring = #moe.scoring<sigmoid>}

// -----

// expected-error @+1 {{expected aux_coef = 0 with n_group > 1: the load-balancing loss counts the top_k of the scores, which is not this router's selection; got 0.01}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, n_group = 2}

// -----

// expected-error @+1 {{expected the 1 selected groups of 2 experts to hold top_k = 3 experts}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 8, top_k = 3, ffn = 4, seq = 4, batch = 1, n_group = 4, topk_group = 1, aux_coef = 0.0 : f32}

// -----

// expected-error @+1 {{expected routed_scaling_factor > 0, got -1}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, routed_scaling_factor = -1.0 : f32}

// -----

// expected-error @+1 {{expected n_group to divide the 4 experts, got 3}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, n_group = 3, aux_coef = 0.0 : f32}

// -----

// expected-error @+1 {{expected shared_experts >= 0, got -1}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, shared_experts = -1}

// -----

// expected-error @+1 {{expected shared_experts * ffn <= 262144, got 65537 * 4}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, shared_experts = 65537}

// -----

// expected-error @+1 {{expected hidden (60) to be divisible by heads (8)}}
moe.transformer @m {vocab = 8, hidden = 60, layers = 1, heads = 8, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected heads (4) to be divisible by kv_heads (3)}}
moe.transformer @m {vocab = 8, hidden = 16, layers = 1, heads = 4, kv_heads = 3, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected an even head dimension for rope, got 3}}
moe.transformer @m {vocab = 8, hidden = 12, layers = 1, heads = 4, kv_heads = 2, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected 1 <= top_k <= 4 (experts), got 5}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 5, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{dense layer 2 is outside [0, 2)}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 2, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, dense_layers = array<i64: 2>}

// -----

// expected-error @+1 {{dense layer 0 is listed twice}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 2, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, dense_layers = array<i64: 0, 0>}

// -----

// expected-error @+1 {{expected rms_eps > 0, got 0}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rms_eps = 0.0 : f32}

// -----

// expected-error @+1 {{expected aux_coef >= 0, got -1}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, aux_coef = -1.0 : f32}

// -----

// expected-error @+1 {{expected 0 <= capacity_factor <= 2 (experts), got -1}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, capacity_factor = -1.0 : f32}

// -----

// A capacity factor of experts / top_k already drops nothing.
// expected-error @+1 {{expected 0 <= capacity_factor <= 2 (experts), got 1e+30}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, capacity_factor = 1.0e30 : f32}

// -----

// expected-error @+1 {{expected 0 < init_std <= 1, got 1e+30}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, init_std = 1.0e30 : f32}

// -----

// expected-error @+1 {{expected 0 < init_std <= 1, got 0}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, init_std = 0.0 : f32}

// -----

// Sizes past the maxima of the op's description (every count the compiler
// derives then stays inside int64) name the attribute and the bound.
// expected-error @+1 {{expected layers <= 4096, got 2147483647}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 2147483647, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected ffn <= 262144, got 9223372036854775807}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 9223372036854775807, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected vocab <= 1048576, got 1048577}}
moe.transformer @m {vocab = 1048577, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected hidden <= 65536, got 131072}}
moe.transformer @m {vocab = 8, hidden = 131072, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected heads <= 65536, got 65537}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 65537, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected kv_heads <= 65536, got 65537}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 65537, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected experts <= 16384, got 16385}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 16385, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected seq <= 1048576, got 1048577}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 1048577, batch = 1}

// -----

// expected-error @+1 {{expected batch <= 1048576, got 9223372036854775807}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 9223372036854775807}

// -----

// expected-error @+1 {{expected dense_ffn <= 262144, got 262145}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, dense_ffn = 262145}

// -----

// expected-error @+1 {{expected batch * seq <= 268435456 tokens per step, got 1099511627776}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 1048576, batch = 1048576}

// -----

// expected-error @+1 {{expected batch * seq * top_k <= 4294967296 routed tokens per step, got 8589934592}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 64, top_k = 32, ffn = 4, seq = 1048576, batch = 256}

// -----

// Each size within its maximum, together too many parameters: 4096 layers
// of 16384 experts of 262144 x 65536.
// expected-error @+1 {{expected at most 281474976710656 parameters (2^48), got}}
moe.transformer @m {vocab = 8, hidden = 65536, layers = 4096, heads = 2, kv_heads = 1, experts = 16384, top_k = 1, ffn = 262144, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected 0 <= beta1 < 1, got 1}}
moe.adamw_config {beta1 = 1.0 : f32}

// -----

// expected-error @+1 {{expected 0 <= beta2 < 1, got -0.5}}
moe.adamw_config {beta2 = -0.5 : f32}

// -----

// expected-error @+1 {{expected eps > 0, got 0}}
moe.adamw_config {eps = 0.0 : f32}

// -----

// expected-error @+1 {{expected weight_decay >= 0, got -0.1}}
moe.adamw_config {weight_decay = -0.1 : f32}

// -----

// expected-error @+1 {{expected peak learning rate >= min >= 0, got 0.001 and 0.01}}
moe.adamw_config {lr = 1.0e-3 : f32, min_lr = 1.0e-2 : f32}

// -----

// expected-error @+1 {{expected 0 <= warmup <= decay_steps, got 20 and 10}}
moe.adamw_config {warmup = 20, decay_steps = 10}

// -----

// expected-error @+1 {{expected max_grad_norm >= 0, got -1}}
moe.adamw_config {max_grad_norm = -1.0 : f32}

// -----

// expected-error @+1 {{expected init_std for normal initialisation}}
moe.param @w : tensor<4xf32> {init = #moe.init<normal>}

// -----

// The runtime's artifact verifier applies the same bound.
// expected-error @+1 {{expected 0 < init_std <= 1, got 1e+30}}
moe.param @w : tensor<4xf32> {init = #moe.init<normal>, init_std = 1.0e30 : f32}

// -----

// expected-error @+1 {{expected 0 < init_std <= 1, got -0.02}}
moe.param @w : tensor<4xf32> {init = #moe.init<normal>, init_std = -0.02 : f32}

// -----

// expected-error @+1 {{'moe.param' op has init_std, which only a normal initialisation reads}}
moe.param @w : tensor<4xf32> {init = #moe.init<ones>, init_std = 0.02 : f32}

// -----

// expected-error @+1 {{expected at most 281474976710656 elements (2^48) per tensor, got 'tensor<4611686018427387904x4xf32>' (attribute 'type')}}
moe.param @w : tensor<4611686018427387904x4xf32> {init = #moe.init<zeros>}

// -----

// expected-error @+1 {{expected optimizer state to be initialised with zeros}}
moe.param @w.exp_avg : tensor<4xf32> {init = #moe.init<ones>, kind = #moe.param_kind<optimizer_state>}

// -----

// expected-error @+1 {{expected at most one '{e}' in the name}}
moe.param @"experts.{e}.w1.{e}" : tensor<2x4xf32> {init = #moe.init<zeros>}

// -----

// expected-error @+1 {{expected stacked expert tensor 'experts.{e}.w1' to have rank >= 2}}
moe.param @"experts.{e}.w1" : tensor<4xf32> {init = #moe.init<zeros>}

// -----

// expected-error @+1 {{expected an initialisation for a weight (zeros, ones or normal)}}
moe.param @w : tensor<4xf32>

// -----

// expected-error @+1 {{expected attribute 'weight_decay' to be finite, got inf}}
moe.adamw_config {weight_decay = 0x7F800000 : f32}

// -----

func.func @weighted_sum_nan(%a: tensor<f32>) {
  // expected-error @+1 {{expected attribute 'coefficients' to be finite, got nan at index 1}}
  %s = moe.weighted_sum %a, %a {coefficients = array<f32: 1.0, 0x7FC00000>} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return
}

// -----

func.func @get_missing() {
  // expected-error @+1 {{@nothing does not name a moe.param}}
  %w = moe.get_param @nothing : tensor<4xf32>
  return
}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
func.func @get_wrong_type() {
  // expected-error @+1 {{result type 'tensor<8xf32>' differs from the type of @w, 'tensor<4xf32>'}}
  %w = moe.get_param @w : tensor<8xf32>
  return
}

// -----

func.func @embedding_tokens_rank(%t: tensor<8xi32>, %table: tensor<16x4xf32>) {
  // expected-error @+1 {{expected tokens of rank 2, got [8]}}
  %h = moe.embedding %t, %table : (tensor<8xi32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @embedding_result(%t: tensor<2x4xi32>, %table: tensor<16x4xf32>) {
  // expected-error @+1 {{expected embeddings of shape [2, 4, 4], got [2, 4, 8]}}
  %h = moe.embedding %t, %table : (tensor<2x4xi32>, tensor<16x4xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @embedding_grad_result(%dy: tensor<2x4x8xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{expected embeddings of shape [2, 4, 4], got [2, 4, 8]}}
  %d = moe.embedding_grad %dy, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<16x4xf32>
  return
}

// -----

func.func @rms_norm_result(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{expected the result to have the input's type}}
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<8x2xf32>
  return
}

// -----

func.func @rms_norm_rank(%x: tensor<8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{expected input of rank >= 2, got [8]}}
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @rms_norm_weight(%x: tensor<2x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{expected weight of shape [8], got [4]}}
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<4xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @rms_norm_epsilon(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{expected epsilon > 0, got 0}}
  %y = moe.rms_norm %x, %w {epsilon = 0.0 : f32} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @rms_norm_grad_types(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{expected grad and input_grad to have the input's type}}
  %dx, %dw = moe.rms_norm_grad %dy, %x, %w {epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32>) -> (tensor<8x2xf32>, tensor<8xf32>)
  return
}

// -----

func.func @rms_norm_grad_weight(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{expected weight_grad to have the weight's shape}}
  %dx, %dw = moe.rms_norm_grad %dy, %x, %w {epsilon = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32>) -> (tensor<2x8xf32>, tensor<4xf32>)
  return
}

// -----

func.func @linear_input_rank(%x: tensor<8xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{expected input of rank >= 2, got [8]}}
  %y = moe.linear %x, %w : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<2x8xf32>, %w: tensor<2x4x8xf32>) {
  // expected-error @+1 {{expected weight of rank 2, got [2, 4, 8]}}
  %y = moe.linear %x, %w : (tensor<2x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @linear_in_features(%x: tensor<2x32xf32>, %w: tensor<4x64xf32>) {
  // expected-error @+1 {{expected the input's last dimension (32) to match the weight's in-features (64)}}
  %y = moe.linear %x, %w : (tensor<2x32xf32>, tensor<4x64xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @linear_output(%x: tensor<2x8xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{expected output of shape [2, 4], got [2, 8]}}
  %y = moe.linear %x, %w : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @linear_grad_input_out_features(%dy: tensor<2x8xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{expected the grad's last dimension (8) to match the weight's out-features (4)}}
  %dx = moe.linear_grad_input %dy, %w : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @linear_grad_input_shape(%dy: tensor<2x4xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{expected input gradient of shape [2, 8], got [2, 4]}}
  %dx = moe.linear_grad_input %dy, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @linear_grad_weight_leading(%dy: tensor<2x4xf32>, %x: tensor<3x8xf32>) {
  // expected-error @+1 {{expected grad and input to have the same leading dimensions, got [2, 4] and [3, 8]}}
  %dw = moe.linear_grad_weight %dy, %x : (tensor<2x4xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @linear_grad_weight_shape(%dy: tensor<2x4xf32>, %x: tensor<2x8xf32>) {
  // expected-error @+1 {{expected weight gradient of shape [4, 8], got [8, 4]}}
  %dw = moe.linear_grad_weight %dy, %x : (tensor<2x4xf32>, tensor<2x8xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @rope_result(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{expected the result to have the input's type}}
  %y = moe.rope %x {num_heads = 2, theta = 1.0e4 : f32} : (tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  return
}

// -----

func.func @rope_rank(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{expected input of rank 3, got [4, 8]}}
  %y = moe.rope %x {num_heads = 2, theta = 1.0e4 : f32} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rope_no_heads(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{expected num_heads > 0, got 0}}
  %y = moe.rope %x {num_heads = 0, theta = 1.0e4 : f32} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @rope_empty(%x: tensor<2x4x0xf32>) {
  // expected-error @+1 {{expected a non-empty last dimension}}
  %y = moe.rope %x {num_heads = 2, theta = 1.0e4 : f32} : (tensor<2x4x0xf32>) -> tensor<2x4x0xf32>
  return
}

// -----

func.func @rope_heads(%x: tensor<2x4x64xf32>) {
  // expected-error @+1 {{expected the last dimension (64) to be divisible by num_heads (3)}}
  %y = moe.rope %x {num_heads = 3, theta = 1.0e4 : f32} : (tensor<2x4x64xf32>) -> tensor<2x4x64xf32>
  return
}

// -----

func.func @rope_odd_head(%x: tensor<2x4x12xf32>) {
  // expected-error @+1 {{expected an even head dimension, got 3}}
  %y = moe.rope %x {num_heads = 4, theta = 1.0e4 : f32} : (tensor<2x4x12xf32>) -> tensor<2x4x12xf32>
  return
}

// -----

func.func @rope_grad_theta(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{expected theta > 0, got 0}}
  %y = moe.rope_grad %x {num_heads = 2, theta = 0.0 : f32} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_groups(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>) {
  // expected-error @+1 {{expected num_heads (4) to be a positive multiple of num_kv_heads (3)}}
  %o, %lse = moe.attention %q, %k, %k {num_heads = 4, num_kv_heads = 3} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>)
  return
}

// -----

func.func @attention_width(%q: tensor<2x4x10xf32>, %k: tensor<2x4x10xf32>) {
  // expected-error @+1 {{expected the query width (10) to be divisible by num_heads (4)}}
  %o, %lse = moe.attention %q, %k, %k {num_heads = 4, num_kv_heads = 4} : (tensor<2x4x10xf32>, tensor<2x4x10xf32>, tensor<2x4x10xf32>) -> (tensor<2x4x10xf32>, tensor<2x4x4xf32>)
  return
}

// -----

func.func @attention_empty_heads(%q: tensor<2x4x0xf32>) {
  // expected-error @+1 {{expected a non-empty head dimension}}
  %o, %lse = moe.attention %q, %q, %q {num_heads = 2, num_kv_heads = 2} : (tensor<2x4x0xf32>, tensor<2x4x0xf32>, tensor<2x4x0xf32>) -> (tensor<2x4x0xf32>, tensor<2x2x4xf32>)
  return
}

// -----

func.func @attention_key(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>) {
  // expected-error @+1 {{expected key of shape [2, 4, 4], got [2, 4, 8]}}
  %o, %lse = moe.attention %q, %k, %k {num_heads = 2, num_kv_heads = 1} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
  return
}

// -----

func.func @attention_lse(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>) {
  // expected-error @+1 {{expected lse of shape [2, 2, 4], got [2, 4, 2]}}
  %o, %lse = moe.attention %q, %k, %k {num_heads = 2, num_kv_heads = 1} : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x2xf32>)
  return
}

// -----

func.func @attention_grad_grad(%dy: tensor<2x4x4xf32>, %q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>, %lse: tensor<2x2x4xf32>) {
  // expected-error @+1 {{expected grad to have the output's type}}
  %dq, %dk, %dv = moe.attention_grad %dy, %q, %k, %k, %q, %lse {num_heads = 2, num_kv_heads = 1}
      : (tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<2x2x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>)
  return
}

// -----

func.func @attention_grad_results(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>, %lse: tensor<2x2x4xf32>) {
  // expected-error @+1 {{expected the gradients to have the types of query, key, value}}
  %dq, %dk, %dv = moe.attention_grad %q, %q, %k, %k, %q, %lse {num_heads = 2, num_kv_heads = 1}
      : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<2x2x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x4xf32>)
  return
}

// -----

func.func @router_probs(%l: tensor<8x4xf32>) {
  // expected-error @+1 {{expected probs to have the logits' type}}
  %p, %w, %i = moe.router %l {top_k = 2} : (tensor<8x4xf32>) -> (tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xi32>)
  return
}

// -----

func.func @router_top_k(%l: tensor<8x4xf32>) {
  // expected-error @+1 {{expected 1 <= top_k <= 4 (experts), got 0}}
  %p, %w, %i = moe.router %l {top_k = 0} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x0xf32>, tensor<8x0xi32>)
  return
}

// -----

func.func @router_weights(%l: tensor<8x4xf32>) {
  // expected-error @+1 {{expected routing weights of shape [8, 2], got [8, 3]}}
  %p, %w, %i = moe.router %l {top_k = 2} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x3xf32>, tensor<8x2xi32>)
  return
}

// -----

func.func @router_indices(%l: tensor<8x4xf32>) {
  // expected-error @+1 {{expected indices of shape [8, 2], got [8, 3]}}
  %p, %w, %i = moe.router %l {top_k = 2} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x2xf32>, tensor<8x3xi32>)
  return
}

// -----

func.func @router_capacity(%l: tensor<8x4xf32>) {
  // expected-error @+1 {{expected 0 <= capacity_factor <= 4 (experts), got -2}}
  %p, %w, %i = moe.router %l {top_k = 2, capacity_factor = -2.0 : f32} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x2xf32>, tensor<8x2xi32>)
  return
}

// -----

func.func @rms_norm_heads(%x: tensor<8x12xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{expected num_heads >= 1 to divide the input's last dimension 12, got 5}}
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-6 : f32, num_heads = 5} : (tensor<8x12xf32>, tensor<4xf32>) -> tensor<8x12xf32>
  return
}

// -----

func.func @rms_norm_head_weight(%x: tensor<8x12xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{expected weight of shape [6], got [4]}}
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-6 : f32, num_heads = 2} : (tensor<8x12xf32>, tensor<4xf32>) -> tensor<8x12xf32>
  return
}

// -----

func.func @router_scale(%l: tensor<8x4xf32>) {
  // expected-error @+1 {{expected scale > 0, got 0}}
  %p, %w, %i = moe.router %l {top_k = 2, scale = 0.0 : f32} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x2xf32>, tensor<8x2xi32>)
  return
}

// -----

func.func @router_groups_divide(%l: tensor<8x6xf32>) {
  // expected-error @+1 {{expected groups to divide the 6 experts, got 4}}
  %p, %w, %i = moe.router %l {top_k = 2, groups = 4} : (tensor<8x6xf32>) -> (tensor<8x6xf32>, tensor<8x2xf32>, tensor<8x2xi32>)
  return
}

// -----

func.func @router_group_size(%l: tensor<8x4xf32>) {
  // expected-error @+1 {{expected at least 2 experts per group (a group scores its two best), got 4 experts in 4 groups}}
  %p, %w, %i = moe.router %l {top_k = 1, groups = 4} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x1xf32>, tensor<8x1xi32>)
  return
}

// -----

func.func @router_top_groups(%l: tensor<8x4xf32>) {
  // expected-error @+1 {{expected 1 <= top_groups <= 2 (groups), got 3}}
  %p, %w, %i = moe.router %l {top_k = 2, groups = 2, top_groups = 3} : (tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x2xf32>, tensor<8x2xi32>)
  return
}

// -----

func.func @router_groups_hold_top_k(%l: tensor<8x8xf32>) {
  // expected-error @+1 {{expected the 1 selected groups of 2 experts to hold top_k = 3 experts}}
  %p, %w, %i = moe.router %l {top_k = 3, groups = 4, top_groups = 1} : (tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x3xf32>, tensor<8x3xi32>)
  return
}

// -----

func.func @router_bias(%l: tensor<8x4xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{expected bias of shape [4], got [3]}}
  %p, %w, %i = moe.router %l bias %b {top_k = 2} : (tensor<8x4xf32>, tensor<3xf32>) -> (tensor<8x4xf32>, tensor<8x2xf32>, tensor<8x2xi32>)
  return
}

// -----

func.func @router_grad_groups(%dw: tensor<8x2xf32>, %p: tensor<8x4xf32>) {
  // expected-error @+1 {{expected groups to divide the 4 experts, got 3}}
  %d = moe.router_grad %dw, %p {top_k = 2, groups = 3} : (tensor<8x2xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @router_grad_types(%dw: tensor<8x2xf32>, %p: tensor<8x4xf32>, %dp: tensor<8x2xf32>) {
  // expected-error @+1 {{expected probs_grad and the result to have the probs' type}}
  %d = moe.router_grad %dw, %p, %dp {top_k = 2} : (tensor<8x2xf32>, tensor<8x4xf32>, tensor<8x2xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @experts_result(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{expected the result to have the input's type}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x32xf32>
  return
}

// -----

func.func @experts_hidden_shape(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{expected hidden of shape [8, 2, 2, 32], got [8, 2, 32]}}
  %y, %h = moe.experts %x, %w, %i, %w1, %w1, %w2 : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> (tensor<8x16xf32>, tensor<8x2x32xf32>)
  return
}

// -----

func.func @experts_hidden_expert_parallel(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<2x32x16xf32>, %w2: tensor<2x16x32xf32>) {
  // expected-error @+1 {{cannot keep the experts' up projections ('hidden') with expert_axes: they would live on the experts' ranks}}
  %y, %h = moe.experts %x, %w, %i, %w1, %w1, %w2 {expert_axes = ["ep"]} : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<2x32x16xf32>, tensor<2x32x16xf32>, tensor<2x16x32xf32>) -> (tensor<8x16xf32>, tensor<8x2x2x32xf32>)
  return
}

// -----

func.func @experts_grad_hidden_shape(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>, %h: tensor<8x2x2x16xf32>) {
  // expected-error @+1 {{expected hidden of shape [8, 2, 2, 32], got [8, 2, 2, 16]}}
  %dx, %dw, %d1, %d3, %d2 = moe.experts_grad %x, %x, %w, %i, %w1, %w1, %w2, %h : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>, tensor<8x2x2x16xf32>) -> (tensor<8x16xf32>, tensor<8x2xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>)
  return
}

// -----

func.func @experts_leading(%x: tensor<8x16xf32>, %w: tensor<4x2xf32>, %i: tensor<4x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{expected routing weights with the input's leading dimensions, got [4, 2] for input [8, 16]}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 : (tensor<8x16xf32>, tensor<4x2xf32>, tensor<4x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @experts_w1_rank(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{expected w1 of rank 3, got [32, 16]}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @experts_w2(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x32x16xf32>) {
  // expected-error @+1 {{expected w2 of shape [4, 16, 32], got [4, 32, 16]}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @experts_fp8_block_without_blockwise(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{has fp8_block without fp8 = #moe.fp8<blockwise> or fp8_dispatch alone}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 {fp8 = #moe.fp8<tensorwise>, fp8_block = 128} : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @experts_fp8_block(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{expected fp8_block in [1, 65536], found 0}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 {fp8 = #moe.fp8<blockwise>, fp8_block = 0} : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @experts_grad_fp8_block(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{has fp8_block without fp8 = #moe.fp8<blockwise> or fp8_dispatch alone}}
  %dx, %dw, %d1, %d3, %d2 = moe.experts_grad %x, %x, %w, %i, %w1, %w1, %w2 {fp8_block = 64} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> (tensor<8x16xf32>, tensor<8x2xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>)
  return
}

// -----

func.func @experts_fp8_scaling(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+2 {{expected ::mlir::moe::Fp8Scaling to be one of: tensorwise, blockwise}}
  // expected-error @+1 {{failed to parse MoE_Fp8ScalingAttr parameter 'value'}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 {fp8 = #moe.fp8<rowwise>} : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @experts_grad_grad(%dy: tensor<8x32xf32>, %x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{expected grad to have the input's type}}
  %g:5 = moe.experts_grad %dy, %x, %w, %i, %w1, %w1, %w2 : (tensor<8x32xf32>, tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> (tensor<8x16xf32>, tensor<8x2xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>)
  return
}

// -----

func.func @experts_grad_results(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{expected the gradients to have the types of input and weights and the shapes of w1, w3, w2}}
  %g:5 = moe.experts_grad %x, %x, %w, %i, %w1, %w1, %w2 : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> (tensor<8x16xf32>, tensor<8x2xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>, tensor<4x16x32xf32>)
  return
}

// -----

func.func @cross_entropy_targets(%l: tensor<2x4x16xf32>, %t: tensor<2x3xi32>) {
  // expected-error @+1 {{expected targets of shape [2, 4], got [2, 3]}}
  %ce = moe.cross_entropy %l, %t : (tensor<2x4x16xf32>, tensor<2x3xi32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_grad_result(%d: tensor<f32>, %l: tensor<2x4x16xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{expected the result to have the logits' type}}
  %g = moe.cross_entropy_grad %d, %l, %t : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @linear_addend(%x: tensor<2x4x8xf32>, %w: tensor<6x8xf32>, %r: tensor<2x4x8xf32>) {
  // expected-error @+1 {{expected the addend to have the result's type 'tensor<2x4x6xf32>', got 'tensor<2x4x8xf32>'}}
  %y = moe.linear %x, %w, %r : (tensor<2x4x8xf32>, tensor<6x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x6xf32>
  return
}

// -----

func.func @linear_grad_input_addend(%dy: tensor<2x4x6xf32>, %w: tensor<6x8xf32>, %r: tensor<2x4x8xbf16>) {
  // expected-error @+1 {{expected the addend to have the result's type 'tensor<2x4x8xf32>', got 'tensor<2x4x8xbf16>'}}
  %dx = moe.linear_grad_input %dy, %w, %r : (tensor<2x4x6xf32>, tensor<6x8xf32>, tensor<2x4x8xbf16>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @linear_cross_entropy_hidden(%h: tensor<2x4x8xf32>, %w: tensor<16x6xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{expected the input's last dimension (8) to match the weight's hidden size (6)}}
  %ce, %lse = moe.linear_cross_entropy %h, %w, %t : (tensor<2x4x8xf32>, tensor<16x6xf32>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4xf32>)
  return
}

// -----

func.func @linear_cross_entropy_targets(%h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %t: tensor<2x3xi32>) {
  // expected-error @+1 {{expected targets of shape [2, 4], got [2, 3]}}
  %ce, %lse = moe.linear_cross_entropy %h, %w, %t : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x3xi32>) -> (tensor<f32>, tensor<2x4xf32>)
  return
}

// -----

func.func @linear_cross_entropy_lse(%h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{expected lse of shape [2, 4], got [2, 4, 16]}}
  %ce, %lse = moe.linear_cross_entropy %h, %w, %t : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4x16xf32>)
  return
}

// -----

func.func @linear_cross_entropy_bf16_lse(%h: tensor<2x4x8xbf16>, %w: tensor<16x8xbf16>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{result #1 must be statically shaped tensor of 32-bit float values}}
  %ce, %lse = moe.linear_cross_entropy %h, %w, %t : (tensor<2x4x8xbf16>, tensor<16x8xbf16>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4xbf16>)
  return
}

// -----

func.func @linear_cross_entropy_grad_input(%d: tensor<f32>, %h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %t: tensor<2x4xi32>, %lse: tensor<2x4xf32>) {
  // expected-error @+1 {{expected input_grad to have the input's type}}
  %dh, %dw = moe.linear_cross_entropy_grad %d, %h, %w, %t, %lse : (tensor<f32>, tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>, tensor<2x4xf32>) -> (tensor<2x4x6xf32>, tensor<16x8xf32>)
  return
}

// -----

func.func @linear_cross_entropy_grad_weight(%d: tensor<f32>, %h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %t: tensor<2x4xi32>, %lse: tensor<2x4xf32>) {
  // expected-error @+1 {{expected weight_grad to have the weight's shape}}
  %dh, %dw = moe.linear_cross_entropy_grad %d, %h, %w, %t, %lse : (tensor<f32>, tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>, tensor<2x4xf32>) -> (tensor<2x4x8xf32>, tensor<8x16xf32>)
  return
}

// -----

func.func @linear_cross_entropy_grad_lse(%d: tensor<f32>, %h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %t: tensor<2x4xi32>, %lse: tensor<4x2xf32>) {
  // expected-error @+1 {{expected lse of shape [2, 4], got [4, 2]}}
  %dh, %dw = moe.linear_cross_entropy_grad %d, %h, %w, %t, %lse : (tensor<f32>, tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>, tensor<4x2xf32>) -> (tensor<2x4x8xf32>, tensor<16x8xf32>)
  return
}

// -----

func.func @aux_loss_top_k(%p: tensor<8x4xf32>) {
  // expected-error @+1 {{expected 1 <= top_k <= 4 (experts), got 6}}
  %a = moe.aux_loss %p {top_k = 6} : (tensor<8x4xf32>) -> tensor<f32>
  return
}

// -----

func.func @aux_loss_grad_result(%d: tensor<f32>, %p: tensor<8x4xf32>) {
  // expected-error @+1 {{expected the result to have the probs' type}}
  %g = moe.aux_loss_grad %d, %p {top_k = 2} : (tensor<f32>, tensor<8x4xf32>) -> tensor<8x2xf32>
  return
}

// -----

func.func @sequence_aux_loss_rank(%p: tensor<8x4xf32>, %i: tensor<8x2xi32>) {
  // expected-error @+1 {{expected probs of rank 3, got [8, 4]}}
  %a = moe.sequence_aux_loss %p, %i : (tensor<8x4xf32>, tensor<8x2xi32>) -> tensor<f32>
  return
}

// -----

func.func @sequence_aux_loss_sequences(%p: tensor<2x8x4xf32>, %i: tensor<2x4x2xi32>) {
  // expected-error @+1 {{expected indices with the probs' batch and sequence [2, 8], got [2, 4, 2]}}
  %a = moe.sequence_aux_loss %p, %i : (tensor<2x8x4xf32>, tensor<2x4x2xi32>) -> tensor<f32>
  return
}

// -----

func.func @sequence_aux_loss_slots(%p: tensor<2x8x4xf32>, %i: tensor<2x8x5xi32>) {
  // expected-error @+1 {{expected 1 <= K <= 4 (experts) slots per token, got 5}}
  %a = moe.sequence_aux_loss %p, %i : (tensor<2x8x4xf32>, tensor<2x8x5xi32>) -> tensor<f32>
  return
}

// -----

func.func @sequence_aux_loss_axes(%p: tensor<2x8x4xf32>, %i: tensor<2x8x2xi32>) {
  // expected-error @+1 {{axis 'dp' splits both the batch and the sequence}}
  %a = moe.sequence_aux_loss %p, %i {batch_axes = ["dp"], sequence_axes = ["dp"]} : (tensor<2x8x4xf32>, tensor<2x8x2xi32>) -> tensor<f32>
  return
}

// -----

func.func @sequence_aux_loss_grad_result(%d: tensor<f32>, %p: tensor<2x8x4xf32>, %i: tensor<2x8x2xi32>) {
  // expected-error @+1 {{expected the result to have the probs' type}}
  %g = moe.sequence_aux_loss_grad %d, %p, %i : (tensor<f32>, tensor<2x8x4xf32>, tensor<2x8x2xi32>) -> tensor<2x8x2xf32>
  return
}

// -----

func.func @z_loss_rank(%l: tensor<4xf32>) {
  // expected-error @+1 {{expected logits of rank >= 2, got [4]}}
  %z = moe.z_loss %l : (tensor<4xf32>) -> tensor<f32>
  return
}

// -----

func.func @z_loss_axes(%l: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.z_loss' op token_axes: unknown axis 'sp'}}
  %z = moe.z_loss %l {token_axes = ["sp"]} : (tensor<8x4xf32>) -> tensor<f32>
  return
}

// -----

func.func @z_loss_grad_result(%d: tensor<f32>, %l: tensor<8x4xf32>) {
  // expected-error @+1 {{expected the result to have the logits' type}}
  %g = moe.z_loss_grad %d, %l : (tensor<f32>, tensor<8x4xf32>) -> tensor<8x2xf32>
  return
}

// -----

func.func @concat_heads_widths(%a: tensor<2x4x6xf32>, %b: tensor<2x4x3xf32>) {
  // expected-error @+1 {{expected the whole of width 6 + 3 (rhs per head) or 6 + 2 * 3 (rhs shared), got 8}}
  %y = moe.concat_heads %a, %b {num_heads = 2} : (tensor<2x4x6xf32>, tensor<2x4x3xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @concat_heads_lhs(%a: tensor<2x4x5xf32>, %b: tensor<2x4x1xf32>) {
  // expected-error @+1 {{expected lhs of num_heads (2) parts, got width 5}}
  %y = moe.concat_heads %a, %b {num_heads = 2} : (tensor<2x4x5xf32>, tensor<2x4x1xf32>) -> tensor<2x4x7xf32>
  return
}

// -----

func.func @split_heads_leading(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{expected rhs with the leading dimensions [2, 4] and element type 'f32', got 'tensor<2x3x2xf32>'}}
  %a, %b = moe.split_heads %x {num_heads = 2} : (tensor<2x4x8xf32>) -> (tensor<2x4x6xf32>, tensor<2x3x2xf32>)
  return
}

// -----

func.func @attention_value_width(%q: tensor<2x4x8xf32>, %v: tensor<2x4x5xf32>) {
  // expected-error @+1 {{expected value of shape [2, 4, num_kv_heads (2) * a positive head dim], got [2, 4, 5]}}
  %o, %l = moe.attention %q, %q, %v {num_heads = 2, num_kv_heads = 2} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x5xf32>) -> (tensor<2x4x5xf32>, tensor<2x2x4xf32>)
  return
}

// -----

func.func @attention_output_width(%q: tensor<2x4x8xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{expected output of shape [2, 4, 6], got [2, 4, 8]}}
  %o, %l = moe.attention %q, %q, %v {num_heads = 2, num_kv_heads = 2} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x6xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
  return
}

// -----

func.func @weighted_sum_empty() {
  // expected-error @+1 {{expected at least one input}}
  %s = moe.weighted_sum {coefficients = array<f32>} : () -> tensor<f32>
  return
}

// -----

func.func @weighted_sum_coefficients(%a: tensor<f32>) {
  // expected-error @+1 {{expected one coefficient per input, got 2 for 1 inputs}}
  %s = moe.weighted_sum %a {coefficients = array<f32: 1.0, 2.0>} : (tensor<f32>) -> tensor<f32>
  return
}

// -----

func.func @global_norm_empty() {
  // expected-error @+1 {{expected at least one input}}
  %n = moe.global_norm : () -> tensor<f32>
  return
}

// -----

func.func @clip_negative(%n: tensor<f32>) {
  // expected-error @+1 {{expected max_norm >= 0, got -1}}
  %c = moe.clip_coefficient %n {max_norm = -1.0 : f32} : tensor<f32>
  return
}

// -----

func.func @learning_rate_schedule(%s: tensor<i32>) {
  // expected-error @+1 {{expected 0 <= warmup <= decay_steps, got 5 and 2}}
  %lr = moe.learning_rate %s {peak = 1.0e-3 : f32, min = 0.0 : f32, warmup = 5, decay_steps = 2} : (tensor<i32>) -> tensor<f32>
  return
}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
moe.param @m : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
func.func @adamw_missing(%g: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{exp_avg_sq @v does not name a moe.param}}
  moe.adamw_update @w, @m, @v, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32} : tensor<4xf32>
  return
}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
moe.param @m : tensor<8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @v : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
func.func @adamw_type(%g: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{exp_avg @m has type 'tensor<8xf32>', but the gradient has type 'tensor<4xf32>'}}
  moe.adamw_update @w, @m, @v, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32} : tensor<4xf32>
  return
}

// -----

moe.mesh @mesh(dp = 2)
moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
moe.param @m : tensor<2xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @v : tensor<2xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
func.func @adamw_gather_alone(%g: tensor<2xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{expected mesh and gather_axes together}}
  moe.adamw_update @w, @m, @v, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32, gather_axes = ["dp"]} : tensor<2xf32>
  return
}

// -----

moe.mesh @mesh(dp = 2)
moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
moe.param @m : tensor<2xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @v : tensor<2xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
func.func @adamw_gather_axis(%g: tensor<2xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{mesh @mesh has no axis 'tp'}}
  moe.adamw_update @w, @m, @v, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32, mesh = @mesh, gather_axes = ["tp"]} : tensor<2xf32>
  return
}

// -----

// ZeRO-1 over dp = 2: the whole weight has twice the gradient's rows.
moe.mesh @mesh(dp = 2)
moe.param @w : tensor<2xf32> {init = #moe.init<zeros>}
moe.param @m : tensor<2xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @v : tensor<2xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
func.func @adamw_gather_rows(%g: tensor<2xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{param @w has type 'tensor<2xf32>', but the gradient has type 'tensor<2xf32>' (a block of 2 ranks)}}
  moe.adamw_update @w, @m, @v, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32, mesh = @mesh, gather_axes = ["dp"]} : tensor<2xf32>
  return
}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
moe.param @m : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
func.func @adamw_same_moments(%g: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{expected exp_avg and exp_avg_sq to be different parameters, got @m twice}}
  moe.adamw_update @w, @m, @m, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32} : tensor<4xf32>
  return
}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
moe.param @w2 : tensor<4xf32> {init = #moe.init<zeros>}
func.func @adamw_kind(%g: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{exp_avg @w must be optimizer state}}
  moe.adamw_update @w, @w, @w2, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32} : tensor<4xf32>
  return
}

// -----

moe.param @m : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @v : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
func.func @adamw_param_kind(%g: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{param @m must be a weight}}
  moe.adamw_update @m, @m, @v, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32} : tensor<4xf32>
  return
}

// -----

func.func @adamw_hyper(%g: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{expected eps > 0, got -1}}
  moe.adamw_update @w, @m, @v, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = -1.0 : f32, weight_decay = 0.0 : f32} : tensor<4xf32>
  return
}

// -----

// expected-error @+1 {{expected at least one axis}}
moe.mesh @m()

// -----

// expected-error @+1 {{expected one size per axis}}
"moe.mesh"() {sym_name = "m", axes = ["dp"], shape = array<i64: 2, 2>} : () -> ()

// -----

// expected-error @+1 {{expected non-empty axis names}}
moe.mesh @m("" = 2)

// -----

// expected-error @+1 {{axis 'dp' is listed twice}}
moe.mesh @m(dp = 2, dp = 4)

// -----

// expected-error @+1 {{expected axis 'tp' to have a positive size, got 0}}
moe.mesh @m(dp = 2, tp = 0)

// -----

func.func @sharding_twice(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{axis 'dp' splits more than one dimension}}
  %y = moe.shard %x {sharding = #moe.sharding<@m, [{dp}, {dp}]>} : tensor<8x8xf32>
  return
}

// -----

func.func @sharding_empty_axis(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{expected non-empty axis names}}
  %y = moe.shard %x {sharding = #moe.sharding<@m, [{""}, {}]>} : tensor<8x8xf32>
  return
}

// -----

func.func @sharding_no_mesh(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{sharding names @m, which is not a moe.mesh}}
  %y = moe.shard %x {sharding = #moe.sharding<@m, [{dp}, {}]>} : tensor<8x8xf32>
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @sharding_rank(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{sharding has 1 dimensions, the tensor 2}}
  %y = moe.shard %x {sharding = #moe.sharding<@m, [{dp}]>} : tensor<8x8xf32>
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @sharding_axis(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{sharding uses axis 'tp', which mesh @m does not have}}
  %y = moe.shard %x {sharding = #moe.sharding<@m, [{dp}, {tp}]>} : tensor<8x8xf32>
  return
}

// -----

moe.mesh @m(dp = 2, tp = 3)
// expected-error @+1 {{dimension 1 of size 8 cannot be split 3 ways}}
moe.param @w : tensor<8x8xf32> {init = #moe.init<zeros>, sharding = #moe.sharding<@m, [{dp}, {tp}]>}

// -----

func.func @collective_no_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{@m does not name a moe.mesh}}
  %y = moe.all_reduce %x {mesh = @m, axes = ["dp"]} : tensor<8xf32>
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @collective_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{mesh @m has no axis 'tp'}}
  %y = moe.all_gather %x {mesh = @m, axes = ["tp"], dim = 0} : (tensor<8xf32>) -> tensor<16xf32>
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @collective_twice(%x: tensor<8xf32>) {
  // expected-error @+1 {{axis 'dp' is listed twice}}
  %y = moe.all_reduce %x {mesh = @m, axes = ["dp", "dp"]} : tensor<8xf32>
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @gather_shape(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{expected dimension 0 of the result to be 16, got 8}}
  %y = moe.all_gather %x {mesh = @m, axes = ["dp"], dim = 0} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @scatter_shape(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{expected dimension 1 of the input to be 8, got 4}}
  %y = moe.reduce_scatter %x {mesh = @m, axes = ["dp"], dim = 1} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @bucket_empty() {
  // expected-error @+1 {{expected at least one input}}
  moe.reduce_bucket {mesh = @m, axes = ["dp"]} : () -> ()
  return
}

// -----

func.func @bucket_counts(%x: tensor<8xf32>) {
  // expected-error @+1 {{expected one result per input, got 2 for 1}}
  %y:2 = moe.reduce_bucket %x {mesh = @m, axes = ["dp"]} : (tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @bucket_element_types(%x: tensor<8xf32>, %h: tensor<8xbf16>) {
  // expected-error @+1 {{expected every input and result of element type 'f32', input 1 or its result is not}}
  %y:2 = moe.reduce_bucket %x, %h {mesh = @m, axes = ["dp"]} : (tensor<8xf32>, tensor<8xbf16>) -> (tensor<8xf32>, tensor<8xbf16>)
  return
}

// -----

func.func @bucket_no_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{@m does not name a moe.mesh}}
  %y = moe.reduce_bucket %x {mesh = @m, axes = ["dp"]} : (tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @bucket_sum_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{expected result 0 of its input's type 'tensor<8xf32>', got 'tensor<4xf32>'}}
  %y = moe.reduce_bucket %x {mesh = @m, axes = ["dp"]} : (tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @bucket_scatter_shape(%x: tensor<8xf32>, %z: tensor<4x2xf32>) {
  // expected-error @+1 {{expected dimension 0 of the input to be 4, got 8}}
  %y:2 = moe.reduce_bucket %z, %x {mesh = @m, axes = ["dp"], scatter} : (tensor<4x2xf32>, tensor<8xf32>) -> (tensor<2x2xf32>, tensor<2xf32>)
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @bucket_scatter_scalar(%x: tensor<f32>) {
  // expected-error @+1 {{expected input 0 and its result of one rank, at least 1}}
  %y = moe.reduce_bucket %x {mesh = @m, axes = ["dp"], scatter} : (tensor<f32>) -> tensor<f32>
  return
}

// -----

moe.mesh @m(dp = 2)
func.func @slice_dim(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{expected dim 2 within the input's rank 2 and input and result of one rank}}
  %y = moe.slice %x {mesh = @m, axes = ["dp"], dim = 2} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @global_norm_axes(%g: tensor<4xf32>) {
  // expected-error @+1 {{expected one entry of input_axes per input, got 2 for 1 inputs}}
  %n = moe.global_norm %g {input_axes = [["dp"], []]} : (tensor<4xf32>) -> tensor<f32>
  return
}

// -----

func.func @experts_fp8_history_without_delayed(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{has fp8_history without fp8 = #moe.fp8<delayed>}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 {fp8 = #moe.fp8<tensorwise>, fp8_history = @h} : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @experts_delayed_without_history(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{expected fp8_history with fp8 = #moe.fp8<delayed>}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 {fp8 = #moe.fp8<delayed>} : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return
}

// -----

moe.param @h : tensor<4x9x17xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
func.func @experts_history_not_a_history(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{fp8_history @h does not name a moe.param of kind fp8_history}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 {fp8 = #moe.fp8<delayed>, fp8_history = @h} : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return
}

// -----

moe.param @h : tensor<4x8x17xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<fp8_history>}
func.func @experts_grad_history_shape(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{expected fp8_history @h of shape [4, 9, L >= 2], got 'tensor<4x8x17xf32>'}}
  %dx, %dw, %d1, %d3, %d2 = moe.experts_grad %x, %x, %w, %i, %w1, %w1, %w2 {fp8 = #moe.fp8<delayed>, fp8_history = @h} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> (tensor<8x16xf32>, tensor<8x2xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>)
  return
}

// -----

// An amax history starts at zero, like optimizer state.
// expected-error @+1 {{expected an fp8 amax history to be initialised with zeros}}
moe.param @h : tensor<4x9x17xf32> {init = #moe.init<ones>, kind = #moe.param_kind<fp8_history>}

// -----

moe.param @w : tensor<4x9x17xf32> {init = #moe.init<zeros>}
func.func @fp8_amax_update_of_a_weight() {
  // expected-error @+1 {{@w does not name a moe.param of kind fp8_history}}
  moe.fp8_amax_update @w
  return
}

// -----

moe.mesh @mesh(dp = 2)
moe.param @h : tensor<4x9x17xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<fp8_history>}
func.func @fp8_amax_update_mesh_without_axes() {
  // expected-error @+1 {{expected mesh and axes together}}
  moe.fp8_amax_update @h {mesh = @mesh}
  return
}

// -----

moe.mesh @mesh(dp = 2)
moe.param @h : tensor<4x9x17xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<fp8_history>}
func.func @fp8_amax_update_unknown_axis() {
  // expected-error @+1 {{mesh @mesh has no axis 'tp'}}
  moe.fp8_amax_update @h {mesh = @mesh, axes = ["tp"]}
  return
}

// -----

moe.param @load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
moe.param @bias : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<router_bias>}
func.func @expert_load_bias_without_rate(%i: tensor<8x2xi32>) {
  // expected-error @+1 {{expected bias_update_rate > 0 with a bias, got 0}}
  moe.expert_load %i {load = @load, bias = @bias} : tensor<8x2xi32>
  return
}

// -----

moe.param @load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
func.func @expert_load_rate_without_bias(%i: tensor<8x2xi32>) {
  // expected-error @+1 {{expected bias_update_rate = 0 without a bias, got 0.01}}
  moe.expert_load %i {load = @load, bias_update_rate = 0.01 : f32} : tensor<8x2xi32>
  return
}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
func.func @expert_load_into_a_weight(%i: tensor<8x2xi32>) {
  // expected-error @+1 {{load @w does not name a moe.param of kind expert_load}}
  moe.expert_load %i {load = @w} : tensor<8x2xi32>
  return
}

// -----

moe.param @load : tensor<4x2xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
func.func @expert_load_of_rank_two(%i: tensor<8x2xi32>) {
  // expected-error @+1 {{expected load @load of shape [experts], got 'tensor<4x2xf32>'}}
  moe.expert_load %i {load = @load} : tensor<8x2xi32>
  return
}

// -----

moe.param @load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
func.func @expert_load_token_axes(%i: tensor<8x2xi32>) {
  // expected-error @+1 {{token_axes: unknown axis 'xx': moec implements dp, fsdp, ep, cp and tp}}
  moe.expert_load %i {load = @load, token_axes = ["xx"]} : tensor<8x2xi32>
  return
}

// -----

moe.param @load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
moe.param @bias : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
func.func @expert_load_update_bias_kind() {
  // expected-error @+1 {{bias @bias does not name a moe.param of kind router_bias}}
  moe.expert_load_update {load = @load, bias = @bias, rate = 0.01 : f32}
  return
}

// -----

moe.param @load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
moe.param @bias : tensor<8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<router_bias>}
func.func @expert_load_update_bias_shape() {
  // expected-error @+1 {{expected bias @bias of type 'tensor<4xf32>', got 'tensor<8xf32>'}}
  moe.expert_load_update {load = @load, bias = @bias, rate = 0.01 : f32}
  return
}

// -----

moe.param @load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>}
moe.param @bias : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<router_bias>}
func.func @expert_load_update_without_rate() {
  // expected-error @+1 {{expected rate > 0 with a bias, got 0}}
  moe.expert_load_update {load = @load, bias = @bias}
  return
}

// -----

// expected-error @+1 {{unknown family 'llama4': expected one of mixtral, qwen3_moe, deepseek_v3}}
moe.transformer @m {family = "llama4", vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1}

// -----

// expected-error @+1 {{expected bias_update_rate >= 0, got -0.01}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, bias_update_rate = -0.01 : f32, aux_coef = 0.0 : f32}

// -----

// expected-error @+1 {{expected qk_rope_head_dim with kv_lora_rank (multi-head latent attention)}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, kv_lora_rank = 4, qk_nope_head_dim = 4, v_head_dim = 4}

// -----

// expected-error @+1 {{expected rope_interleave only with multi-head latent attention (kv_lora_rank)}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_interleave = true}

// -----

// expected-error @+1 {{expected kv_lora_rank with q_lora_rank (multi-head latent attention)}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, q_lora_rank = 4}

// -----

// expected-error @+1 {{expected an even qk_rope_head_dim for rope, got 3}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, kv_lora_rank = 4, qk_rope_head_dim = 3, qk_nope_head_dim = 4, v_head_dim = 4}

// -----

// expected-error @+1 {{expected kv_heads = heads (2) with multi-head latent attention, got 1}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, kv_lora_rank = 4, qk_rope_head_dim = 2, qk_nope_head_dim = 4, v_head_dim = 4}

// -----

// expected-error @+1 {{expected no head_dim with multi-head latent attention (its widths are qk_nope_head_dim, qk_rope_head_dim, v_head_dim)}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 2, head_dim = 4, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, kv_lora_rank = 4, qk_rope_head_dim = 2, qk_nope_head_dim = 4, v_head_dim = 4}

// -----

// expected-error @+1 {{expected qk_norm = false with multi-head latent attention}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 2, qk_norm = true, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, kv_lora_rank = 4, qk_rope_head_dim = 2, qk_nope_head_dim = 4, v_head_dim = 4}

// -----

// expected-error @+1 {{expected 0 < v_head_dim <= 65536, got 0}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 2, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, kv_lora_rank = 4, qk_rope_head_dim = 2, qk_nope_head_dim = 4, v_head_dim = 0}

// -----

// expected-error @+1 {{expected seq_aux_coef >= 0, got -0.001}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, seq_aux_coef = -0.001 : f32}

// -----

// expected-error @+1 {{expected z_loss_coef >= 0, got -0.001}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, z_loss_coef = -0.001 : f32}

// -----

// expected-error @+1 {{expected aux_coef = 0 with bias_update_rate > 0: the load-balancing loss counts the top_k of the scores, which is not this router's selection; got 0.01}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 4, top_k = 1, ffn = 4, seq = 4, batch = 1, bias_update_rate = 0.01 : f32}

// -----

//===----------------------------------------------------------------------===//
// Unknown attributes: every moe op knows its own attributes, and the dialect
// the discardable moe.* ones its passes write.
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'moe.transformer' op has unknown attribute 'num_nextn_predict_layers'; known attributes: aux_coef, batch, bias_update_rate, capacity_factor, dense_ffn, dense_layers, document_mask, eos_token_id, experts, family, ffn, head_dim, heads, hidden, init_std, kv_heads, kv_lora_rank, layers, n_group, norm_topk_prob, precision, q_lora_rank, qk_nope_head_dim, qk_norm, qk_rope_head_dim, rms_eps, rope_interleave, rope_scaling, rope_theta, routed_scaling_factor, scoring, seq, seq_aux_coef, shared_experts, softmax_scale_factor, sym_name, tie_word_embeddings, top_k, topk_group, v_head_dim, vocab, z_loss_coef}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, num_nextn_predict_layers = 1}

// -----

// expected-error @+1 {{'moe.transformer' op has unknown attribute 'router'; known attributes: aux_coef,}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, router = "sigmoid"}

// -----

// expected-error @+1 {{'moe.adamw_config' op has unknown attribute 'momentum'; known attributes: beta1, beta2, decay_steps, eps, lr, max_grad_norm, min_lr, warmup, weight_decay}}
moe.adamw_config {lr = 1.0e-3 : f32, momentum = 0.9 : f32}

// -----

func.func @unknown_on_model_op(%x: tensor<8x16xf32>, %w: tensor<16xf32>) -> tensor<8x16xf32> {
  // expected-error @+1 {{'moe.rms_norm' op has unknown attribute 'frobnicate'; known attributes: epsilon}}
  %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32, frobnicate = 3} : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// -----

func.func @unknown_on_op_without_attributes(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'moe.add' op has unknown attribute 'frobnicate'; known attributes: none}}
  %y = moe.add %x, %x {frobnicate = 3} : tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// An attribute of another dialect's namespace is not a moe op's either.
func.func @foreign_attribute(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'moe.add' op has unknown attribute 'func.frobnicate'; known attributes: none}}
  %y = moe.add %x, %x {func.frobnicate = 3} : tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

func.func @unknown_discardable(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'moe.add' op has unknown attribute 'moe.pipline_stage'; known moe attributes: moe.arena_bytes, moe.full_recompute_flops, moe.memory_budget, moe.microbatches, moe.model, moe.offsets, moe.partitioned, moe.peak_live_bytes, moe.pipeline_phase, moe.pipeline_ranks, moe.pipeline_schedule, moe.pipeline_slots, moe.pipeline_stage, moe.precision, moe.recompute_flops, moe.recomputed, moe.sharding, moe.sharding_origin, moe.sharding_seed, moe.sharding_seed_origin, moe.target}}
  %y = moe.add %x, %x {moe.pipline_stage = 0} : tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// moe.* attributes are checked on every op, not only moe ones.
// expected-error @+1 {{'builtin.module' op has unknown attribute 'moe.frobnicate'; known moe attributes: moe.arena_bytes,}}
module attributes {moe.frobnicate = 3} {
}

// -----

// The target recorded on the module names one of the capability records.
// expected-error @+1 {{'builtin.module' op expected attribute 'moe.target' to be a target name (cpu, a100, h100, h200), got "v100"}}
module attributes {moe.target = "v100"} {
}

// -----

func.func @discardable_of_wrong_type(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'moe.add' op expected attribute 'moe.pipeline_stage' to be an integer in [-1, 1048576), got "0"}}
  %y = moe.add %x, %x {moe.pipeline_stage = "0"} : tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// The runtime and the memory plan allocate per pipeline rank.
// expected-error @+1 {{'func.func' op expected attribute 'moe.pipeline_ranks' to be an integer in [1, 1048576], got 1000000000000 : i64}}
func.func @too_many_pipeline_ranks() attributes {moe.pipeline_ranks = 1000000000000} {
  return
}

// -----

// expected-error @+1 {{'func.func' op expected attribute 'moe.pipeline_slots' to be an array<i64: ...> of counts in [1, 1048576], got 2 : i64}}
func.func @slots_of_wrong_type() attributes {moe.pipeline_slots = 2} {
  return
}

// -----

// The memory plan divides by them.
// expected-error @+1 {{'func.func' op expected attribute 'moe.pipeline_slots' to be an array<i64: ...> of counts in [1, 1048576], got array<i64: 2, 0>}}
func.func @zero_slots() attributes {moe.pipeline_slots = array<i64: 2, 0>} {
  return
}

// -----

func.func @sharding_of_wrong_type(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'moe.add' op expected attribute 'moe.sharding' to be an array of #moe.sharding, one per result, got "dp"}}
  %y = moe.add %x, %x {moe.sharding = "dp"} : tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// expected-error @+1 {{'func.func' op argument 0 has unknown attribute 'moe.shardng'; known moe argument attributes: moe.sharding, moe.sharding_origin}}
func.func @unknown_argument_attribute(%x: tensor<8xf32> {moe.shardng = 1}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op argument 0 expected attribute 'moe.sharding_origin' to be a string, got 1 : i64}}
func.func @argument_attribute_of_wrong_type(%x: tensor<8xf32> {moe.sharding_origin = 1}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op result 0 has unknown attribute 'moe.grad'; known moe result attributes: moe.grad_of}}
func.func @unknown_result_attribute(%x: tensor<8xf32>) -> (tensor<8xf32> {moe.grad = @w}) {
  return %x : tensor<8xf32>
}

// -----

// expected-error @+1 {{'func.func' op result 0 expected attribute 'moe.grad_of' to be a symbol reference to a moe.param, got "w"}}
func.func @result_attribute_of_wrong_type(%x: tensor<8xf32>) -> (tensor<8xf32> {moe.grad_of = "w"}) {
  return %x : tensor<8xf32>
}

// -----

moe.mesh @m(tp = 2)
// expected-error @+1 {{has sharding_origin without a sharding}}
moe.param @w : tensor<8x8xf32> {init = #moe.init<zeros>, sharding_origin = ["", ""]}

// -----

moe.mesh @m(tp = 2)
// expected-error @+1 {{expected one sharding_origin entry per dimension, got 1 for rank 2}}
moe.param @w : tensor<8x8xf32> {init = #moe.init<zeros>, sharding = #moe.sharding<@m, [{}, {tp}]>, sharding_origin = ["user pin"]}

// -----

//===----------------------------------------------------------------------===//
// Mesh axes: moec implements dp, fsdp, ep, cp and tp; pipeline stages come from
// --pp, not from a mesh axis.
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'moe.mesh' op unknown axis 'sp': moec implements dp, fsdp, ep, cp and tp (pipeline stages: --pp)}}
moe.mesh @m(dp = 2, sp = 2)

// -----

// expected-error @+1 {{'moe.mesh' op axis 'pp' is not a mesh axis: pipeline stages come from --pp (e.g. --pp 2); mesh axes are dp, fsdp, ep, cp and tp}}
moe.mesh @m(pp = 2)

// -----

// expected-error @+1 {{expected at most 1048576 ranks, got more at axis 'tp'}}
moe.mesh @m(dp = 4096, tp = 4096)

// -----

func.func @sharding_unknown_axis(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{unknown axis 'fsbp': moec implements dp, fsdp, ep, cp and tp (pipeline stages: --pp)}}
  %y = moe.shard %x {sharding = #moe.sharding<@m, [{fsbp}, {}]>} : tensor<8x8xf32>
  return
}

// -----

func.func @expert_axes_unknown(%x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) -> tensor<8x16xf32> {
  // expected-error @+1 {{'moe.experts' op expert_axes: unknown axis 'pt': moec implements dp, fsdp, ep, cp and tp (pipeline stages: --pp)}}
  %y = moe.experts %x, %w, %i, %w1, %w1, %w2 {expert_axes = ["pt"]} : (tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// -----

func.func @expert_axes_twice(%dy: tensor<8x16xf32>, %x: tensor<8x16xf32>, %w: tensor<8x2xf32>, %i: tensor<8x2xi32>, %w1: tensor<4x32x16xf32>, %w2: tensor<4x16x32xf32>) {
  // expected-error @+1 {{'moe.experts_grad' op expert_axes: axis 'ep' is listed twice}}
  %dx, %dw, %dw1, %dw3, %dw2 = moe.experts_grad %dy, %x, %w, %i, %w1, %w1, %w2 {expert_axes = ["ep", "ep"]} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>) -> (tensor<8x16xf32>, tensor<8x2xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<4x16x32xf32>)
  return
}

// -----

func.func @token_axes_unknown(%l: tensor<2x4x16xf32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  // expected-error @+1 {{'moe.cross_entropy' op token_axes: unknown axis 'sp'}}
  %ce = moe.cross_entropy %l, %t {token_axes = ["dp", "sp"]} : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %ce : tensor<f32>
}

// -----

func.func @token_axes_unknown_fused(%h: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  // expected-error @+1 {{'moe.linear_cross_entropy' op token_axes: unknown axis 'sp'}}
  %ce, %lse = moe.linear_cross_entropy %h, %w, %t {token_axes = ["sp"]} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4xf32>)
  return %ce : tensor<f32>
}

// -----

func.func @token_axes_unknown_grad(%g: tensor<f32>, %l: tensor<2x4x16xf32>, %t: tensor<2x4xi32>) -> tensor<2x4x16xf32> {
  // expected-error @+1 {{'moe.cross_entropy_grad' op token_axes: unknown axis 'sp'}}
  %d = moe.cross_entropy_grad %g, %l, %t {token_axes = ["sp"]} : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<2x4x16xf32>
  return %d : tensor<2x4x16xf32>
}

// -----

func.func @aux_token_axes_unknown(%p: tensor<8x4xf32>) -> tensor<f32> {
  // expected-error @+1 {{'moe.aux_loss' op token_axes: unknown axis 'sp'}}
  %a = moe.aux_loss %p {top_k = 2, token_axes = ["sp"]} : (tensor<8x4xf32>) -> tensor<f32>
  return %a : tensor<f32>
}

// -----

func.func @aux_grad_token_axes_unknown(%g: tensor<f32>, %p: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'moe.aux_loss_grad' op token_axes: unknown axis 'sp'}}
  %d = moe.aux_loss_grad %g, %p {top_k = 2, token_axes = ["sp"]} : (tensor<f32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %d : tensor<8x4xf32>
}

// -----

func.func @input_axes_unknown(%g: tensor<4xf32>, %h: tensor<4xf32>) -> tensor<f32> {
  // expected-error @+1 {{'moe.global_norm' op input_axes: unknown axis 'sp'}}
  %n = moe.global_norm %g, %h {input_axes = [["dp"], ["sp"]]} : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  return %n : tensor<f32>
}

// -----

//===----------------------------------------------------------------------===//
// Tensor sizes: at most 2^48 elements, so that byte counts cannot overflow.
//===----------------------------------------------------------------------===//

func.func @tensor_too_large(%x: tensor<4611686018427387904x4xf32>) -> tensor<4611686018427387904x4xf32> {
  // expected-error @+1 {{'moe.add' op expected at most 281474976710656 elements (2^48) per tensor, got 'tensor<4611686018427387904x4xf32>' (operand 0)}}
  %y = moe.add %x, %x : tensor<4611686018427387904x4xf32>
  return %y : tensor<4611686018427387904x4xf32>
}

// -----

func.func @result_too_large() -> tensor<16777216x16777217xf32> {
  // expected-error @+1 {{'moe.constant' op expected at most 281474976710656 elements (2^48) per tensor, got 'tensor<16777216x16777217xf32>' (result 0)}}
  %y = moe.constant 0.0 : tensor<16777216x16777217xf32>
  return %y : tensor<16777216x16777217xf32>
}

// -----

func.func @cast_same_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected the result to have the other element type than the input's 'f32'}}
  %y = moe.cast %x : tensor<4xf32> to tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @cast_shape(%x: tensor<4xf32>) -> tensor<8xbf16> {
  // expected-error @+1 {{expected the result to have the input's shape [4], got [8]}}
  %y = moe.cast %x : tensor<4xf32> to tensor<8xbf16>
  return %y : tensor<8xbf16>
}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
// expected-error @+1 {{expected a working copy to name its master}}
moe.param @w.bf16 : tensor<4xbf16> {kind = #moe.param_kind<working_copy>}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
// expected-error @+1 {{has a master, which only a working copy has}}
moe.param @w2 : tensor<4xf32> {init = #moe.init<zeros>, master = @w}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
// expected-error @+1 {{expected no initialisation for a working copy (the runtime rounds its master)}}
moe.param @w.bf16 : tensor<4xbf16> {init = #moe.init<zeros>, kind = #moe.param_kind<working_copy>, master = @w}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
// expected-error @+1 {{expected a working copy of type bf16, got 'tensor<4xf32>'}}
moe.param @w.bf16 : tensor<4xf32> {kind = #moe.param_kind<working_copy>, master = @w}

// -----

// expected-error @+1 {{expected an f32 tensor, got 'tensor<4xbf16>'}}
moe.param @w : tensor<4xbf16> {init = #moe.init<zeros>}

// -----

moe.param @w : tensor<8xf32> {init = #moe.init<zeros>}
// expected-error @+1 {{expected its master @w of shape [4], got [8]}}
moe.param @w.bf16 : tensor<4xbf16> {kind = #moe.param_kind<working_copy>, master = @w}

// -----

moe.param @m : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
// expected-error @+1 {{master @m must be a weight}}
moe.param @m.bf16 : tensor<4xbf16> {kind = #moe.param_kind<working_copy>, master = @m}

// -----

// expected-error @+1 {{master @nothing does not name a moe.param}}
moe.param @w.bf16 : tensor<4xbf16> {kind = #moe.param_kind<working_copy>, master = @nothing}

// -----

moe.mesh @mesh(fsdp = 2)
moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
// expected-error @+1 {{expected the sharding of its master @w, or the master's to split dimension 0 further (ZeRO-1)}}
moe.param @w.bf16 : tensor<4xbf16> {kind = #moe.param_kind<working_copy>, master = @w, sharding = #moe.sharding<@mesh, [{fsdp}]>}

// -----

// ZeRO-1 splits the master further than its copy, never the copy further.
moe.mesh @mesh(dp = 2, tp = 2)
moe.param @w : tensor<4x4xf32> {init = #moe.init<zeros>, sharding = #moe.sharding<@mesh, [{tp}, {}]>}
// expected-error @+1 {{expected the sharding of its master @w, or the master's to split dimension 0 further (ZeRO-1)}}
moe.param @w.bf16 : tensor<4x4xbf16> {kind = #moe.param_kind<working_copy>, master = @w, sharding = #moe.sharding<@mesh, [{tp, dp}, {}]>}

// -----

// Partitioned, ZeRO-1's master is the copy's block of rows.
module attributes {moe.partitioned} {
  moe.mesh @mesh(dp = 2)
  moe.param @w : tensor<4x4xf32> {init = #moe.init<zeros>, sharding = #moe.sharding<@mesh, [{dp}, {}]>}
  // expected-error @+1 {{expected its master @w of shape [2, 4], got [4, 4]}}
  moe.param @w.bf16 : tensor<4x4xbf16> {kind = #moe.param_kind<working_copy>, master = @w}
}

// -----

moe.param @w : tensor<4xf32> {init = #moe.init<zeros>}
moe.param @u : tensor<4xf32> {init = #moe.init<zeros>}
moe.param @m : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @v : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @u.bf16 : tensor<4xbf16> {kind = #moe.param_kind<working_copy>, master = @u}
func.func @adamw_foreign_working_copy(%g: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i32>) {
  // expected-error @+1 {{working_copy @u.bf16 must be the working copy of @w}}
  moe.adamw_update @w, @m, @v, %g, %lr, %lr, %s {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.0 : f32, working_copy = @u.bf16} : tensor<4xf32>
  return
}

// -----

func.func @router_bf16_logits(%x: tensor<2x4x4xbf16>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float values}}
  %p, %w, %i = moe.router %x {top_k = 2} : (tensor<2x4x4xbf16>) -> (tensor<2x4x4xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>)
  return
}

// -----

func.func @pipeline_gradient_sum_bf16(%a: tensor<4x4xbf16>, %b: tensor<4x4xbf16>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float values}}
  %s = moe.pipeline_gradient_sum %a, %b : tensor<4x4xbf16>
  return
}

// -----

func.func @pipeline_gradient_sum_types(%a: tensor<4x4xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %s = "moe.pipeline_gradient_sum"(%a, %b) : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @rope_positions_shape(%x: tensor<2x4x8xf32>, %p: tensor<2x5xi32>) {
  // expected-error @+1 {{expected positions of shape [2, 4], got [2, 5]}}
  %y = moe.rope %x, %p {num_heads = 2, theta = 1.0e4 : f32} : (tensor<2x4x8xf32>, tensor<2x5xi32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_positions_shape(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>, %v: tensor<2x4x4xf32>, %p: tensor<4x2xi32>) {
  // expected-error @+1 {{expected positions of shape [2, 4], got [4, 2]}}
  %o, %lse = moe.attention %q, %k, %v, %p {num_heads = 2, num_kv_heads = 1} : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<4x2xi32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
  return
}

// -----

//===----------------------------------------------------------------------===//
// sequence_axes (context parallelism): the queries are a block of the
// sequence split over mesh axes, cp outermost; the keys are the whole.
//===----------------------------------------------------------------------===//

module {
  moe.mesh @mesh(cp = 2, tp = 2)
  func.func @sequence_axes_not_in_mesh(%q: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
    // expected-error @+1 {{'moe.rope' op sequence_axes names 'dp', which the mesh does not have; its axes are cp, tp}}
    %r = moe.rope %q {num_heads = 4, theta = 1.0e4 : f32, sequence_axes = ["dp"]} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %r : tensor<2x4x8xf32>
  }
}

// -----

module {
  moe.mesh @mesh(cp = 2, tp = 2)
  func.func @sequence_axes_cp_inside(%q: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
    // expected-error @+1 {{'moe.rope_grad' op sequence_axes must start with 'cp' when they name it: its load-balanced split is outermost}}
    %r = moe.rope_grad %q {num_heads = 4, theta = 1.0e4 : f32, sequence_axes = ["tp", "cp"]} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %r : tensor<2x4x8xf32>
  }
}

// -----

func.func @sequence_axes_without_mesh(%q: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'moe.rope' op has sequence_axes but its module has no moe.mesh}}
  %r = moe.rope %q {num_heads = 4, theta = 1.0e4 : f32, sequence_axes = ["cp"]} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %r : tensor<2x4x8xf32>
}

// -----

module {
  moe.mesh @mesh(cp = 2)
  func.func @sequence_keys_not_whole(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>) -> tensor<2x4x8xf32> {
    // expected-error @+1 {{'moe.attention' op expected key of shape [2, 8, 4], got [2, 4, 4]}}
    %o, %lse = moe.attention %q, %k, %k {num_heads = 4, num_kv_heads = 2, sequence_axes = ["cp"]} : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>)
    return %o : tensor<2x4x8xf32>
  }
}

// -----

func.func @ring_without_sequence_axes(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'moe.attention' op has ring but no sequence_axes to pass the blocks around}}
  %o, %lse = moe.attention %q, %k, %k {num_heads = 4, num_kv_heads = 2, ring} : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>)
  return %o : tensor<2x4x8xf32>
}

// -----

// Scaled RoPE (#moe.rope_scaling): one case per parse and verifier message.
// expected-error @+1 {{unknown rope scaling 'ntk'; known: linear, yarn, llama3}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<ntk, factor = 2.0>}

// -----

// expected-error @+1 {{'beta_fast' is not a parameter of linear scaling; its parameters: factor}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<linear, factor = 2.0, beta_fast = 32.0>}

// -----

// expected-error @+1 {{'factor' is given twice}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<linear, factor = 2.0, factor = 3.0>}

// -----

// expected-error @+1 {{yarn scaling needs 'original_max_position_embeddings'}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<yarn, factor = 4.0, beta_fast = 32.0, beta_slow = 1.0, truncate = true, attention_factor = 1.0>}

// -----

// expected-error @+1 {{expected true or false}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<yarn, factor = 4.0, original_max_position_embeddings = 8, beta_fast = 32.0, beta_slow = 1.0, truncate = yes, attention_factor = 1.0>}

// -----

// expected-error @+1 {{expected finite rope scaling parameters}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<linear, factor = 0x7FF0000000000000>}

// -----

// expected-error @+1 {{expected factor >= 1, got 0.5}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<linear, factor = 0.5>}

// -----

// expected-error @+1 {{expected attention_factor > 0, got 0}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<yarn, factor = 4.0, original_max_position_embeddings = 8, beta_fast = 32.0, beta_slow = 1.0, truncate = true, attention_factor = 0.0>}

// -----

// expected-error @+1 {{expected original_max_position_embeddings >= 1, got 0}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<llama3, factor = 4.0, original_max_position_embeddings = 0, low_freq_factor = 1.0, high_freq_factor = 4.0>}

// -----

// expected-error @+1 {{expected 0 < beta_slow <= beta_fast, got beta_slow = 32 and beta_fast = 1}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<yarn, factor = 4.0, original_max_position_embeddings = 8, beta_fast = 1.0, beta_slow = 32.0, truncate = true, attention_factor = 1.0>}

// -----

// expected-error @+1 {{expected 0 < low_freq_factor < high_freq_factor, got 4 and 1}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, rope_scaling = #moe.rope_scaling<llama3, factor = 4.0, original_max_position_embeddings = 8, low_freq_factor = 4.0, high_freq_factor = 1.0>}

// -----

// expected-error @+1 {{expected softmax_scale_factor > 0, got 0}}
moe.transformer @m {vocab = 8, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 4, seq = 4, batch = 1, softmax_scale_factor = 0.0 : f32}

// -----

func.func @attention_scale_factor(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>) {
  // expected-error @+1 {{expected scale_factor > 0, got -1}}
  %o, %lse = moe.attention %q, %k, %k {num_heads = 2, num_kv_heads = 1, scale_factor = -1.0 : f32}
      : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
  return
}
