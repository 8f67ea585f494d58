// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s --mlir-print-op-generic | moe-opt | FileCheck %s

// CHECK: moe.transformer @tiny {batch = 2 : i64, dense_layers = array<i64: 0>
moe.transformer @tiny {vocab = 16, hidden = 8, layers = 2, heads = 2,
                       kv_heads = 1, experts = 4, top_k = 2, ffn = 4, seq = 4,
                       batch = 2, dense_layers = array<i64: 0>}
// CHECK: moe.adamw_config {lr = 3.000000e-03 : f32, warmup = 5 : i64}
moe.adamw_config {lr = 3.0e-3 : f32, warmup = 5}

// CHECK: moe.param @w : tensor<8x8xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
moe.param @w : tensor<8x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
// CHECK: moe.param @history : tensor<4x9x17xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<fp8_history>}
moe.param @history : tensor<4x9x17xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<fp8_history>}
// CHECK: moe.param @bias : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<router_bias>, no_weight_decay}
moe.param @bias : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<router_bias>, no_weight_decay}
// CHECK: moe.param @load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>, no_weight_decay}
moe.param @load : tensor<4xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<expert_load>, no_weight_decay}
// CHECK: moe.param @w.exp_avg : tensor<8x8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @w.exp_avg : tensor<8x8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @w.exp_avg_sq : tensor<8x8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
// CHECK: moe.param @"experts.{e}.w1.weight" : tensor<4x4x8xf32> {init = #moe.init<normal>, init_std = 2.000000e-02 : f32}
moe.param @"experts.{e}.w1.weight" : tensor<4x4x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}

// CHECK-LABEL: func.func @model_ops
func.func @model_ops(%tokens: tensor<2x4xi32>, %table: tensor<16x8xf32>,
                     %norm: tensor<8xf32>, %wq: tensor<8x8xf32>,
                     %wk: tensor<4x8xf32>, %gate: tensor<4x8xf32>,
                     %w1: tensor<4x4x8xf32>, %w2: tensor<4x8x4xf32>,
                     %bias: tensor<4xf32>)
    -> tensor<f32> {
  // CHECK: moe.get_param @w : tensor<8x8xf32>
  %p = moe.get_param @w : tensor<8x8xf32>
  // CHECK: moe.embedding %{{.*}}, %{{.*}} : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  %h = moe.embedding %tokens, %table : (tensor<2x4xi32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.rms_norm {{.*}} {epsilon = 9.99999974E-6 : f32}
  %n = moe.rms_norm %h, %norm {epsilon = 1.0e-5 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.linear
  %q = moe.linear %n, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %k = moe.linear %n, %wk : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  // CHECK: moe.rope {{.*}} {num_heads = 2 : i64, theta = 1.000000e+04 : f32}
  %qr = moe.rope %q {num_heads = 2, theta = 1.0e4 : f32} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %kr = moe.rope %k {num_heads = 1, theta = 1.0e4 : f32} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: moe.attention {{.*}} {num_heads = 2 : i64, num_kv_heads = 1 : i64}
  %o, %lse = moe.attention %qr, %kr, %kr {num_heads = 2, num_kv_heads = 1}
      : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
  // Scaled RoPE and a softmax scale factor (YaRN).
  // CHECK: moe.rope {{.*}} scaling = #moe.rope_scaling<yarn, factor = 4.000000e+00, original_max_position_embeddings = 8, beta_fast = 3.200000e+01, beta_slow = 1.000000e+00, truncate = false, attention_factor = 1.138600e+00>
  %qy = moe.rope %q {num_heads = 2, theta = 1.0e4 : f32, scaling = #moe.rope_scaling<yarn, factor = 4.0, original_max_position_embeddings = 8, beta_fast = 32.0, beta_slow = 1.0, truncate = false, attention_factor = 1.1386>} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.rope_grad {{.*}} scaling = #moe.rope_scaling<llama3, factor = 8.000000e+00, original_max_position_embeddings = 8192, low_freq_factor = 1.000000e+00, high_freq_factor = 4.000000e+00>
  %dqy = moe.rope_grad %q {num_heads = 2, theta = 5.0e5 : f32, scaling = #moe.rope_scaling<llama3, factor = 8.0, original_max_position_embeddings = 8192, low_freq_factor = 1.0, high_freq_factor = 4.0>} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.rope {{.*}} scaling = #moe.rope_scaling<linear, factor = 2.000000e+00>
  %ql = moe.rope %q {num_heads = 2, theta = 1.0e4 : f32, scaling = #moe.rope_scaling<linear, factor = 2.0>} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.attention {{.*}} scale_factor = 1.875000e+00 : f32
  %oy, %lsey = moe.attention %qy, %kr, %kr {num_heads = 2, num_kv_heads = 1, scale_factor = 1.875 : f32}
      : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
  %a = moe.add %h, %o : tensor<2x4x8xf32>
  %logits = moe.linear %a, %gate : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  // CHECK: moe.router {{.*}} {capacity_factor = 1.250000e+00 : f32, top_k = 2 : i64}
  %probs, %weights, %indices = moe.router %logits {top_k = 2, capacity_factor = 1.25 : f32}
      : (tensor<2x4x4xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>)
  // CHECK: moe.router %{{.*}} bias %{{.*}} {groups = 2 : i64, scale = 2.500000e+00 : f32, scoring = #moe.scoring<sigmoid>, top_k = 2 : i64}
  %sp, %sw, %si = moe.router %logits bias %bias {top_k = 2, scoring = #moe.scoring<sigmoid>, scale = 2.5 : f32, groups = 2, top_groups = 1}
      : (tensor<2x4x4xf32>, tensor<4xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>)
  // CHECK: moe.experts {{.*}} {fp8 = #moe.fp8<blockwise>, fp8_block = 64 : i64}
  %y = moe.experts %a, %weights, %indices, %w1, %w1, %w2 {fp8 = #moe.fp8<blockwise>, fp8_block = 64}
      : (tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<2x4x8xf32>
  // Delayed scaling reads and updates an amax history; FP8 on the wire only.
  // CHECK: moe.experts {{.*}} {fp8 = #moe.fp8<delayed>, fp8_history = @history}
  %yd = moe.experts %a, %weights, %indices, %w1, %w1, %w2 {fp8 = #moe.fp8<delayed>, fp8_history = @history}
      : (tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.experts {{.*}} {fp8_block = 128 : i64, fp8_dispatch}
  %yw = moe.experts %a, %weights, %indices, %w1, %w1, %w2 {fp8_block = 128, fp8_dispatch}
      : (tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<2x4x8xf32>
  // The saved up projections: a second result, read by the gradient.
  // CHECK: moe.experts {{.*}} -> (tensor<2x4x8xf32>, tensor<2x4x2x2x4xf32>)
  %yk, %hidden = moe.experts %a, %weights, %indices, %w1, %w1, %w2
      : (tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x2x2x4xf32>)
  // CHECK: moe.experts_grad {{.*}}, tensor<2x4x2x2x4xf32>) -> (
  %exk:5 = moe.experts_grad %yk, %a, %weights, %indices, %w1, %w1, %w2, %hidden
      : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<2x4x2x2x4xf32>)
      -> (tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>)
  // CHECK: moe.rms_norm %{{.*}}, %{{.*}} {epsilon = 9.99999997E-7 : f32, num_heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<4xf32>) -> tensor<2x4x8xf32>
  %qn = moe.rms_norm %a, %bias {epsilon = 1.0e-6 : f32, num_heads = 2} : (tensor<2x4x8xf32>, tensor<4xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.fp8_amax_update @history
  moe.fp8_amax_update @history
  // CHECK: moe.expert_load %{{.*}} {bias = @bias, bias_update_rate = 1.000000e-03 : f32, load = @load, token_axes = ["dp"]} : tensor<2x4x2xi32>
  moe.expert_load %indices {load = @load, bias = @bias, bias_update_rate = 1.0e-3 : f32, token_axes = ["dp"]} : tensor<2x4x2xi32>
  // CHECK: moe.expert_load_update {bias = @bias, load = @load, rate = 1.000000e-03 : f32}
  moe.expert_load_update {load = @load, bias = @bias, rate = 1.0e-3 : f32}
  // CHECK: moe.expert_load_update {load = @load}
  moe.expert_load_update {load = @load}
  // CHECK: moe.swiglu %{{.*}}, %{{.*}} : tensor<2x4x8xf32>
  %s = moe.swiglu %y, %a : tensor<2x4x8xf32>
  %vocab = moe.linear %s, %table : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  // CHECK: moe.linear {{.*}}, {{.*}}, {{.*}} : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %residual = moe.linear %s, %wq, %s : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.cross_entropy
  %ce = moe.cross_entropy %vocab, %tokens : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  // CHECK: moe.linear_cross_entropy {{.*}} -> (tensor<f32>, tensor<2x4xf32>)
  %fce, %headLse = moe.linear_cross_entropy %s, %table, %tokens : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4xf32>)
  // CHECK: moe.aux_loss {{.*}} {top_k = 2 : i64}
  %aux = moe.aux_loss %probs {top_k = 2} : (tensor<2x4x4xf32>) -> tensor<f32>
  // CHECK: moe.split_heads {{.*}} {num_heads = 2 : i64} : (tensor<2x4x8xf32>) -> (tensor<2x4x6xf32>, tensor<2x4x2xf32>)
  %nope, %rope = moe.split_heads %s {num_heads = 2} : (tensor<2x4x8xf32>) -> (tensor<2x4x6xf32>, tensor<2x4x2xf32>)
  // CHECK: moe.split_heads {{.*}} : (tensor<2x4x8xf32>) -> (tensor<2x4x6xf32>, tensor<2x4x1xf32>)
  %nope2, %summed = moe.split_heads %s {num_heads = 2} : (tensor<2x4x8xf32>) -> (tensor<2x4x6xf32>, tensor<2x4x1xf32>)
  // CHECK: moe.concat_heads {{.*}} : (tensor<2x4x6xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %joined = moe.concat_heads %nope2, %summed {num_heads = 2} : (tensor<2x4x6xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  // Values narrower than the keys (MLA): the output has their width.
  // CHECK: moe.attention {{.*}} -> (tensor<2x4x6xf32>, tensor<2x2x4xf32>)
  %mla, %mlaLse = moe.attention %s, %joined, %nope {num_heads = 2, num_kv_heads = 2}
      : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x6xf32>) -> (tensor<2x4x6xf32>, tensor<2x2x4xf32>)
  // CHECK: moe.sequence_aux_loss {{.*}} : (tensor<2x4x4xf32>, tensor<2x4x2xi32>) -> tensor<f32>
  %seqAux = moe.sequence_aux_loss %probs, %indices : (tensor<2x4x4xf32>, tensor<2x4x2xi32>) -> tensor<f32>
  // CHECK: moe.z_loss {{.*}} {token_axes = ["dp"]} : (tensor<2x4x4xf32>) -> tensor<f32>
  %z = moe.z_loss %probs {token_axes = ["dp"]} : (tensor<2x4x4xf32>) -> tensor<f32>
  // CHECK: moe.weighted_sum {{.*}} {coefficients = array<f32: 1.000000e+00, 0.00999999977>}
  %loss = moe.weighted_sum %ce, %aux {coefficients = array<f32: 1.0, 0.01>} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @grad_ops
func.func @grad_ops(%dy: tensor<2x4x8xf32>, %x: tensor<2x4x8xf32>,
                    %tokens: tensor<2x4xi32>, %norm: tensor<8xf32>,
                    %w: tensor<8x8xf32>, %k: tensor<2x4x4xf32>,
                    %lse: tensor<2x2x4xf32>, %dw: tensor<2x4x2xf32>,
                    %probs: tensor<2x4x4xf32>, %weights: tensor<2x4x2xf32>,
                    %indices: tensor<2x4x2xi32>, %w1: tensor<4x4x8xf32>,
                    %w2: tensor<4x8x4xf32>, %logits: tensor<2x4x16xf32>,
                    %step: tensor<i32>, %bias: tensor<4xf32>) {
  // CHECK: moe.constant 1.000000e+00 : tensor<f32>
  %one = moe.constant 1.0 : tensor<f32>
  // CHECK: moe.embedding_grad
  %dt = moe.embedding_grad %dy, %tokens : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<16x8xf32>
  // CHECK: moe.rms_norm_grad
  %dx, %dn = moe.rms_norm_grad %dy, %x, %norm {epsilon = 1.0e-5 : f32}
      : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
  // CHECK: moe.linear_grad_input
  %di = moe.linear_grad_input %dy, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.linear_grad_weight
  %dwt = moe.linear_grad_weight %dy, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<8x8xf32>
  // CHECK: moe.rope_grad
  %dr = moe.rope_grad %dy {num_heads = 2, theta = 1.0e4 : f32} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.attention_grad
  %dq, %dk, %dv = moe.attention_grad %dy, %x, %k, %k, %x, %lse {num_heads = 2, num_kv_heads = 1}
      : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<2x2x4xf32>)
      -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>)
  // CHECK: moe.router_grad {{.*}} : (tensor<2x4x2xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %dl0 = moe.router_grad %dw, %probs {top_k = 2} : (tensor<2x4x2xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: moe.router_grad {{.*}} : (tensor<2x4x2xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %dl1 = moe.router_grad %dw, %probs, %probs {top_k = 2} : (tensor<2x4x2xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: moe.router_grad %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} {groups = 2 : i64, normalize = false, scale = 2.500000e+00 : f32, scoring = #moe.scoring<sigmoid>, top_k = 2 : i64}
  %dl2 = moe.router_grad %dw, %probs, %probs bias %bias {top_k = 2, scoring = #moe.scoring<sigmoid>, normalize = false, scale = 2.5 : f32, groups = 2, top_groups = 1} : (tensor<2x4x2xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<4xf32>) -> tensor<2x4x4xf32>
  // CHECK: moe.experts_grad
  %ex:5 = moe.experts_grad %dy, %x, %weights, %indices, %w1, %w1, %w2
      : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>)
      -> (tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>)
  // CHECK: moe.swiglu_grad
  %dg, %du = moe.swiglu_grad %dy, %x, %x : tensor<2x4x8xf32>
  // CHECK: moe.cross_entropy_grad
  %dlogits = moe.cross_entropy_grad %one, %logits, %tokens : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<2x4x16xf32>
  // CHECK: moe.linear_cross_entropy_grad {{.*}} {token_axes = ["dp"]}
  %tokenLse = moe.constant 0.0 : tensor<2x4xf32>
  %dh, %dtable = moe.linear_cross_entropy_grad %one, %x, %w, %tokens, %tokenLse {token_axes = ["dp"]} : (tensor<f32>, tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4xi32>, tensor<2x4xf32>) -> (tensor<2x4x8xf32>, tensor<8x8xf32>)
  // CHECK: moe.aux_loss_grad
  %dp = moe.aux_loss_grad %one, %probs {top_k = 2} : (tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: moe.sequence_aux_loss_grad {{.*}} {batch_axes = ["dp"], sequence_axes = ["tp"]}
  %dseq = moe.sequence_aux_loss_grad %one, %probs, %indices {batch_axes = ["dp"], sequence_axes = ["tp"]} : (tensor<f32>, tensor<2x4x4xf32>, tensor<2x4x2xi32>) -> tensor<2x4x4xf32>
  // CHECK: moe.z_loss_grad
  %dz = moe.z_loss_grad %one, %probs : (tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: moe.global_norm
  %n = moe.global_norm %dwt, %dn : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<f32>
  // CHECK: moe.clip_coefficient {{.*}} {max_norm = 1.000000e+00 : f32} : tensor<f32>
  %c = moe.clip_coefficient %n {max_norm = 1.0 : f32} : tensor<f32>
  // CHECK: moe.learning_rate
  %lr = moe.learning_rate %step {peak = 1.0e-3 : f32, min = 1.0e-4 : f32, warmup = 2, decay_steps = 10} : (tensor<i32>) -> tensor<f32>
  // CHECK: moe.adamw_update @w, @w.exp_avg, @w.exp_avg_sq, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {beta1
  moe.adamw_update @w, @w.exp_avg, @w.exp_avg_sq, %dwt, %lr, %c, %step
      {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.1 : f32} : tensor<8x8xf32>
  return
}

// CHECK: moe.mesh @mesh(dp = 2, ep = 2, tp = 2)
moe.mesh @mesh(dp = 2, ep = 2, tp = 2)
// CHECK: moe.param @sharded : tensor<8x4xf32> {init = #moe.init<zeros>, sharding = #moe.sharding<@mesh, [{dp, ep}, {tp}]>}
moe.param @sharded : tensor<8x4xf32> {init = #moe.init<zeros>, sharding = #moe.sharding<@mesh, [{dp, ep}, {tp}]>}

// CHECK-LABEL: func.func @pins
func.func @pins(%x: tensor<8x4x6xf32>, %t: tensor<8x4xi32>) -> tensor<8x4x6xf32> {
  // CHECK: moe.shard %{{.*}} {sharding = #moe.sharding<@mesh, [{dp}, {}, {}]>} : tensor<8x4x6xf32>
  %y = moe.shard %x {sharding = #moe.sharding<@mesh, [{dp}, {}, {}]>} : tensor<8x4x6xf32>
  // CHECK: moe.shard %{{.*}} {sharding = #moe.sharding<@mesh, [{dp, ep}, {tp}]>} : tensor<8x4xi32>
  %u = moe.shard %t {sharding = #moe.sharding<@mesh, [{dp, ep}, {tp}]>} : tensor<8x4xi32>
  return %y : tensor<8x4x6xf32>
}

// Mixed precision: a BF16 working copy of a master weight, read by BF16
// ops, updated by the master's AdamW; casts between the float types.
// CHECK: moe.transformer @bf16 {{.*}}precision = #moe.precision<bf16>
moe.transformer @bf16 {vocab = 16, hidden = 8, layers = 1, heads = 2, kv_heads = 1, experts = 2, top_k = 1, ffn = 8, seq = 4, batch = 2, precision = #moe.precision<bf16>}
moe.param @mp : tensor<8x8xf32> {init = #moe.init<normal>, init_std = 0.02 : f32}
moe.param @mp.exp_avg : tensor<8x8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
moe.param @mp.exp_avg_sq : tensor<8x8xf32> {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
// CHECK: moe.param @mp.bf16 : tensor<8x8xbf16> {kind = #moe.param_kind<working_copy>, master = @mp}
moe.param @mp.bf16 : tensor<8x8xbf16> {kind = #moe.param_kind<working_copy>, master = @mp}

// CHECK-LABEL: func.func @mixed_precision
func.func @mixed_precision(%x: tensor<2x4x8xbf16>, %lr: tensor<f32>, %step: tensor<i32>) -> tensor<2x4x8xf32> {
  %w = moe.get_param @mp.bf16 : tensor<8x8xbf16>
  // CHECK: moe.linear {{.*}} -> tensor<2x4x8xbf16>
  %y = moe.linear %x, %w : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xbf16>
  // CHECK: moe.linear {{.*}} -> tensor<2x4x8xf32>
  %logits = moe.linear %x, %w : (tensor<2x4x8xbf16>, tensor<8x8xbf16>) -> tensor<2x4x8xf32>
  %dw = moe.linear_grad_weight %y, %x : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
  // CHECK: moe.cast %{{.*}} : tensor<8x8xbf16> to tensor<8x8xf32>
  %dw32 = moe.cast %dw : tensor<8x8xbf16> to tensor<8x8xf32>
  // CHECK: moe.adamw_update @mp, {{.*}} working_copy = @mp.bf16
  moe.adamw_update @mp, @mp.exp_avg, @mp.exp_avg_sq, %dw32, %lr, %lr, %step
      {beta1 = 0.9 : f32, beta2 = 0.95 : f32, eps = 1.0e-8 : f32, weight_decay = 0.1 : f32, working_copy = @mp.bf16} : tensor<8x8xf32>
  return %logits : tensor<2x4x8xf32>
}

// A gradient bucket: sums, and blocks of dimension 0 of sums.
// CHECK-LABEL: func.func @buckets
func.func @buckets(%a: tensor<8xf32>, %b: tensor<4x8xf32>) -> (tensor<8xf32>, tensor<2x8xf32>) {
  // CHECK: moe.reduce_bucket %{{.*}}, %{{.*}} {axes = ["dp"], mesh = @mesh} : (tensor<8xf32>, tensor<4x8xf32>) -> (tensor<8xf32>, tensor<4x8xf32>)
  %s:2 = moe.reduce_bucket %a, %b {mesh = @mesh, axes = ["dp"]} : (tensor<8xf32>, tensor<4x8xf32>) -> (tensor<8xf32>, tensor<4x8xf32>)
  // CHECK: moe.reduce_bucket %{{.*}}, %{{.*}} {axes = ["tp"], mesh = @mesh, scatter} : (tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4xf32>, tensor<2x8xf32>)
  %r:2 = moe.reduce_bucket %s#0, %s#1 {mesh = @mesh, axes = ["tp"], scatter} : (tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4xf32>, tensor<2x8xf32>)
  return %s#0, %r#1 : tensor<8xf32>, tensor<2x8xf32>
}

// CHECK-LABEL: func.func @pipeline_gradient_sum
func.func @pipeline_gradient_sum(%head: tensor<8x8xf32>, %lookup: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK: moe.pipeline_gradient_sum %{{.*}}, %{{.*}} : tensor<8x8xf32>
  %g = moe.pipeline_gradient_sum %head, %lookup : tensor<8x8xf32>
  return %g : tensor<8x8xf32>
}

// Document masking: RoPE and attention at each token's document position.
// CHECK-LABEL: func.func @document_positions
func.func @document_positions(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>, %v: tensor<2x4x4xf32>, %p: tensor<2x4xi32>) -> tensor<2x4x8xf32> {
  // CHECK: moe.rope %{{.*}}, %{{.*}} {num_heads = 2 : i64
  %qr = moe.rope %q, %p {num_heads = 2, theta = 1.0e4 : f32} : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  // CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 2 : i64, num_kv_heads = 1 : i64}
  %o, %lse = moe.attention %qr, %k, %v, %p {num_heads = 2, num_kv_heads = 1} : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4xi32>) -> (tensor<2x4x8xf32>, tensor<2x2x4xf32>)
  return %o : tensor<2x4x8xf32>
}
