//===- Passes.td - moec passes -----------------------------*- tablegen -*-===//
#ifndef MOE_TRANSFORMS_PASSES_TD
#define MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def ExpandTransformer : Pass<"moe-expand-transformer", "ModuleOp"> {
  let summary = "expand moe.transformer into parameters and a forward function";
  let description = [{
    Replaces the config-level `moe.transformer` op by the op-level model: one
    `moe.param` per HF Mixtral tensor and `func.func @forward(%tokens,
    %targets) -> tensor<f32>` computing the training loss (cross-entropy plus
    `aux_coef` times the mean load-balancing loss of the MoE layers). Model
    sizes are kept in the module attribute `moe.model` for reports and the
    artifact.

    Example:

    ```mlir
    moe.transformer @tiny {vocab = 256, hidden = 64, layers = 2, heads = 4,
                           kv_heads = 2, experts = 4, top_k = 2, ffn = 128,
                           seq = 64, batch = 8}
    ```
    becomes `moe.param @"model.embed_tokens.weight" : tensor<256x64xf32>`,
    ... and `func.func @forward(%arg0: tensor<8x64xi32>, %arg1:
    tensor<8x64xi32>) -> tensor<f32>`.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::mlir::moe::MoEDialect"];
}

def FuseLinearCrossEntropy : Pass<"moe-fuse-linear-cross-entropy",
                                  "ModuleOp"> {
  let summary = "fuse the LM head with the cross-entropy it feeds";
  let description = [{
    Replaces a `moe.linear` whose only reader is a `moe.cross_entropy` by one
    `moe.linear_cross_entropy`, which never holds the `[..., V]` logits: it
    keeps each token's log-sum-exp, and its gradient (derived by
    moe-autodiff) recomputes the logits block by block. Runs on the forward
    function, before moe-autodiff and sharding, so every mesh runs the same
    math. On a target whose backend lacks the fused kernel (its capability
    record's `linear_cross_entropy`) the pair stays unfused. See
    lib/Transforms/FuseLinearCrossEntropy.cpp.

    Example:

    ```mlir
    %logits = moe.linear %h, %w
        : (tensor<8x64x64xf32>, tensor<256x64xf32>) -> tensor<8x64x256xf32>
    %ce = moe.cross_entropy %logits, %targets
        : (tensor<8x64x256xf32>, tensor<8x64xi32>) -> tensor<f32>
    ```
    becomes
    ```mlir
    %ce, %lse = moe.linear_cross_entropy %h, %w, %targets
        : (tensor<8x64x64xf32>, tensor<256x64xf32>, tensor<8x64xi32>)
        -> (tensor<f32>, tensor<8x64xf32>)
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"",
           "the loss function">,
    Option<"target", "target", "std::string", "\"cpu\"",
           "the target whose backend must run the fused kernel">,
  ];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def Autodiff : Pass<"moe-autodiff", "ModuleOp"> {
  let summary = "derive the backward pass of a loss function";
  let description = [{
    Reverse-mode differentiation of a single-block function returning a
    scalar loss: walks it backwards, asks every op for its vector-Jacobian
    product (`DifferentiableOpInterface`), sums the contributions to values
    used more than once, and returns the loss followed by the gradient of
    every weight parameter in declaration order, each result tagged
    `moe.grad_of = @param`. The function is renamed to `output`.

    Example: `func.func @forward(...) -> tensor<f32>` becomes
    `func.func @forward_backward(...) -> (tensor<f32>, tensor<256x64xf32>
    {moe.grad_of = @"model.embed_tokens.weight"}, ...)`.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"",
           "the loss function to differentiate">,
    Option<"output", "output", "std::string", "\"forward_backward\"",
           "the name of the function with the backward pass">,
  ];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def Optimizer : Pass<"moe-optimizer", "ModuleOp"> {
  let summary = "append global-norm clipping, the LR schedule and AdamW";
  let description = [{
    Turns a forward/backward function (loss and gradients tagged
    `moe.grad_of`) into one training step, `train_step(%tokens, %targets,
    %step) -> (loss, grad_norm, lr)`: declares the AdamW moments of every
    weight as `moe.param`s of kind `optimizer_state`, computes the global
    gradient norm, the clipping coefficient and the learning rate, and
    updates every weight with `moe.adamw_update`. Settings come from the
    module's `moe.adamw_config` (defaults when absent); norm weights are not
    weight-decayed (`no_weight_decay`).

    Example:

    ```mlir
    func.func @forward_backward(%tokens: tensor<8x64xi32>,
                                %targets: tensor<8x64xi32>)
        -> (tensor<f32>, tensor<64xf32> {moe.grad_of = @"model.norm.weight"})
    ```
    becomes

    ```mlir
    moe.param @"model.norm.weight.exp_avg" : tensor<64xf32>
        {init = #moe.init<zeros>, kind = #moe.param_kind<optimizer_state>}
    func.func @train_step(%tokens: tensor<8x64xi32>, %targets: tensor<8x64xi32>,
                          %step: tensor<i32>)
        -> (tensor<f32>, tensor<f32>, tensor<f32>) {
      ...
      %norm = moe.global_norm %g : (tensor<64xf32>) -> tensor<f32>
      %clip = moe.clip_coefficient %norm {max_norm = 1.0 : f32} : tensor<f32>
      %lr = moe.learning_rate %step {...} : (tensor<i32>) -> tensor<f32>
      moe.adamw_update @"model.norm.weight", ..., %g, %lr, %clip, %step {...}
          : tensor<64xf32>
      return %loss, %norm, %lr : tensor<f32>, tensor<f32>, tensor<f32>
    }
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward_backward\"",
           "the forward/backward function">,
    Option<"output", "output", "std::string", "\"train_step\"",
           "the name of the training-step function">,
  ];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def MixedPrecision : Pass<"moe-mixed-precision", "ModuleOp"> {
  let summary = "store the step in BF16 with fp32 master weights";
  let description = [{
    Decides the dtypes of the training step (docs/precision.md). The
    precision is `precision` when given, else the request moe.transformer
    recorded on the module (`moe.precision`), else the target's default
    (fp32 for `cpu`, bf16 for GPU targets). For fp32 the step is left as
    it is. For bf16:
    * every weight `@W` (the fp32 master, which AdamW updates with its fp32
      moments) gets a BF16 working copy `@"W.bf16"` (kind `working_copy`,
      `master = @W`, the master's sharding), which the forward and backward
      read and `moe.adamw_update` rounds the updated master into
      (`working_copy`);
    * activations and their gradients become BF16, except what stays fp32:
      the router's logits (the gate GEMM's output), probabilities and top-k
      weights and their gradients, attention statistics (`lse`), losses and
      every scalar;
    * weight gradients are fp32 (`grad-reduce-dtype=fp32`), or BF16 with a
      `moe.cast` to fp32 before the global norm (`=bf16`), so that their
      reduction over ranks, placed by moe-partition before the cast, moves
      BF16.
    The applied recipe is recorded as the module attribute `moe.precision`
    (`{compute = "bf16", grad_reduce = "fp32"}`).

    Example: with `precision=bf16`,

    ```mlir
    %w = moe.get_param @"model.norm.weight" : tensor<64xf32>
    %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32}
        : (tensor<8x64x64xf32>, tensor<64xf32>) -> tensor<8x64x64xf32>
    ```
    becomes

    ```mlir
    moe.param @"model.norm.weight.bf16" : tensor<64xbf16>
        {kind = #moe.param_kind<working_copy>, master = @"model.norm.weight"}
    %w = moe.get_param @"model.norm.weight.bf16" : tensor<64xbf16>
    %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32}
        : (tensor<8x64x64xbf16>, tensor<64xbf16>) -> tensor<8x64x64xbf16>
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step">,
    Option<"precision", "precision", "std::string", "\"\"",
           "fp32 or bf16 (empty: the module's request, else the target's)">,
    Option<"gradReduceDtype", "grad-reduce-dtype", "std::string", "\"\"",
           "what weight gradients are reduced in: fp32 or bf16 "
           "(empty: fp32)">,
    Option<"target", "target", "std::string", "\"cpu\"",
           "the target whose default precision applies">,
  ];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def PlanMemory : Pass<"moe-plan-memory", "ModuleOp"> {
  let summary = "assign arena offsets to the step's temporaries by liveness";
  let description = [{
    Computes the live range of every tensor the training step creates and
    packs them into one arena, reusing the bytes of dead tensors: sweeps in
    program order take the smallest free range that holds each tensor (best
    fit, 64-byte aligned) and release it after its last reader, starting
    from the tensors live at the peak (and, for a pipelined step, at the
    peaks of the busiest ranks), or from the step's first or last op; the
    smallest arena wins. Each sweep is O(n log n) in the tensors. Each op
    gets `moe.offsets` (one byte offset per result) and the function
    `moe.arena_bytes` and `moe.peak_live_bytes` (the largest total of
    simultaneously live tensors, a lower bound of the arena). Fails, on the
    op, when the arena would exceed 2^56 bytes.

    Example:

    ```mlir
    func.func @train_step(...) -> (...)
        attributes {moe.arena_bytes = 3965120 : i64,
                    moe.peak_live_bytes = 3964940 : i64} {
      %y = moe.add %a, %b {moe.offsets = array<i64: 4096>} : tensor<8x64x64xf32>
      ...
    }
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the function to plan">,
  ];
}

def PropagateSharding : Pass<"moe-propagate-sharding", "ModuleOp"> {
  let summary = "choose how every tensor of the step is split over the mesh";
  let description = [{
    Seeds the parallelism policy (include/moe/Transforms/Sharding.h: data
    parallelism over dp/fsdp/ep, Megatron tensor parallelism over tp, expert
    parallelism over ep, FSDP storage over fsdp) and propagates it through
    the factor rule of every op. Records on the IR, for every value, its
    `moe.sharding` and `moe.sharding_origin` (why), and on every weight and
    moment its storage `sharding`. Impossible meshes (heads not divisible by
    tp, experts by ep, the batch by the data-parallel ranks) are errors.

    Example, with `moe.mesh @mesh(dp = 2, tp = 2)`:

    ```mlir
    %q = moe.linear %n, %wq {moe.sharding = [#moe.sharding<@mesh, [{dp}, {}, {tp} ]>],
        moe.sharding_origin = ["column-parallel linear (Megatron): output
        features split over tp, via moe.linear"]}
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step to shard">,
    ListOption<"foldExperts", "fold-experts", "std::string",
               "token axes the experts are split over too (Megatron's MoE "
               "parallel folding: dp, fsdp, cp or tp)">,
    Option<"zeroOne", "zero1", "bool", "false",
           "ZeRO-1: split each weight's optimizer state over the data ranks "
           "holding the weight, and gather the weight after each update">,
  ];
}

def Partition : Pass<"moe-partition", "ModuleOp"> {
  let summary = "rewrite the sharded step into the program of one rank";
  let description = [{
    After moe-propagate-sharding: gives every tensor its per-rank shape and
    inserts the collectives that make the ranks compute the global step
    (all-gather, slice, all-reduce, reduce-scatter over mesh groups; means
    and norms over split tokens get the axes to combine over). Parameters
    and their moments become their local blocks, keeping their `sharding`.
    See lib/Transforms/Partition.cpp for the rules.

    Example, with `moe.mesh @mesh(tp = 2)`, a row-parallel projection:

    ```mlir
    %o = moe.linear %a, %w : (tensor<8x64x32xf32>, tensor<64x32xf32>)
        -> tensor<8x64x64xf32>
    %r = moe.all_reduce %o {mesh = @mesh, axes = ["tp"]} : tensor<8x64x64xf32>
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step to partition">,
  ];
}

def SetMesh : Pass<"moe-set-mesh", "ModuleOp"> {
  let summary = "declare the device mesh the step is partitioned over";
  let description = [{
    Parses `mesh` (axis=size pairs over the axes moec implements: dp, fsdp,
    ep, tp) and puts the module's `moe.mesh @mesh` op first in it, replacing
    any mesh the module declared. moec runs it for `--mesh`; the sharding
    passes read the mesh from the IR. Fails, naming the axis, on an unknown
    axis, a repeated one or a size that is not positive.

    Example, `--moe-set-mesh="mesh=dp=2,tp=2"`:

    ```mlir
    moe.mesh @mesh(dp = 2, tp = 2)
    ```
  }];
  let options = [
    Option<"mesh", "mesh", "std::string", "\"\"",
           "the mesh, e.g. dp=2,tp=2">,
  ];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def SplitBatch : Pass<"moe-split-batch", "ModuleOp"> {
  let summary = "compile the step for one microbatch of the model's batch";
  let description = [{
    Runs on the config-level model, before moe-expand-transformer: sets the
    batch of every `moe.transformer` to `batch` when that is positive (the
    global batch `moec --plan` chose), then divides it by `microbatches`
    and records the count as the module's `moe.microbatches`, which the
    sharding seeds and the cost model read. Fails, at the op, when the
    microbatches do not divide the batch, and on a module without a
    `moe.transformer`.

    Example, `--moe-split-batch="microbatches=4"` turns

    ```mlir
    moe.transformer @tiny {..., batch = 8}
    ```
    into `moe.transformer @tiny {..., batch = 2}` in a module with
    `moe.microbatches = 4 : i64`.
  }];
  let options = [
    Option<"batch", "batch", "uint64_t", "0",
           "the sequences per step before the split (0: the model's)">,
    Option<"microbatches", "microbatches", "unsigned", "1",
           "the microbatches per step">,
  ];
}

def PlanPipeline : Pass<"moe-plan-pipeline", "ModuleOp"> {
  let summary = "cut the layer sequence into stages and choose the schedule";
  let description = [{
    Runs on the global training step (after moe-optimizer and sharding
    propagation, before partitioning): cuts the units (embedding, each
    decoder layer, head) into `stages` x `virtual-stages` chunks balanced by
    compute (include/moe/Transforms/Pipeline.h), builds the pipeline
    schedule over `microbatches` and replays it, and records both as the
    module's `moe.pipeline_schedule`: the schedule's kind and sizes and the
    model stage of every unit. moe-split-pipeline-stages tags the
    partitioned step from it, and the artifact writer, the memory report
    and the cost model rebuild the schedule from it. With `report`, prints
    the cut, the schedule's timeline and its bubble to stdout; with `trace`,
    writes the schedule as a Chrome trace (Perfetto). Fails when there are
    fewer units than chunks or the schedule cannot run the microbatches.

    Example, `--moe-plan-pipeline="stages=2 microbatches=4"` on the
    two-layer tiny model records

    ```mlir
    module attributes {moe.pipeline_schedule = {microbatches = 4 : i64,
        schedule = "1f1b", stages = 2 : i64,
        unit_stages = array<i64: 0, 0, 1, 1>, virtual_stages = 1 : i64}}
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step to cut">,
    Option<"stages", "stages", "unsigned", "1", "pipeline ranks">,
    Option<"virtualStages", "virtual-stages", "unsigned", "1",
           "model chunks per pipeline rank (interleaved schedules)">,
    Option<"microbatches", "microbatches", "unsigned", "1",
           "microbatches per step">,
    Option<"schedule", "schedule", "std::string", "\"1f1b\"",
           "gpipe, 1f1b, interleaved-1f1b or zero-bubble">,
    Option<"report", "report", "bool", "false",
           "print the cut and the schedule to stdout">,
    Option<"trace", "trace", "std::string", "\"\"",
           "write the schedule as a Chrome trace to this file">,
  ];
}

def SplitPipelineStages : Pass<"moe-split-pipeline-stages", "ModuleOp"> {
  let summary = "tag every op of the step with its pipeline stage and phase";
  let description = [{
    Prepares the (partitioned) training step of one microbatch for pipeline
    parallelism and gradient accumulation. Every op gets
    `moe.pipeline_stage` (the model stage, i.e. chunk, that runs it; -1 for
    the optimizer ops every stage runs) and `moe.pipeline_phase`
    (`forward`, `backward`, `weight` or `optimizer`):
      * forward: what the loss depends on; backward: the rest of the
        gradient computation; optimizer: the global norm, clipping, learning
        rate and AdamW (an AdamW runs on its parameter's stage).
      * A stage comes from the op's layer (its location names the unit:
        embedding, layer i, head; `unit-stages` maps units to stages);
        unnamed ops (residual adds, gradient sums, collectives) join the
        stage of their operands, or of their users when they have none.
      * With `split-weight-gradients` (zero-bubble schedules), weight
        gradients that only the optimizer reads form the `weight` phase and
        move after their stage's last backward op, so that the memory plan
        made afterwards holds for running them later.
    The function gets `moe.pipeline_ranks`, which moe-plan-memory reads to
    let values of different ranks share arena bytes, and
    `moe.pipeline_slots`, the microbatches each rank holds at once (`slots`),
    which the memory report and moe-rematerialize count.
    Without `unit-stages`, the cut, the ranks, the slots and whether to
    split weight gradients come from the module's `moe.pipeline_schedule`
    (moe-plan-pipeline).
    Fails, at the op, when a value would flow against the schedule's order
    (e.g. a forward op reading a later stage) or a parameter is read by two
    stages.

    Example, `--moe-split-pipeline-stages="unit-stages=0,0,1,1"` on the
    two-layer tiny model:

    ```mlir
    %14 = moe.add %1, %13 {moe.pipeline_phase = "forward",
                           moe.pipeline_stage = 0 : i64} : tensor<8x64x64xf32>
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step to split">,
    ListOption<"unitStages", "unit-stages", "unsigned",
               "the model stage of each unit (embedding, layers, head)">,
    Option<"ranks", "ranks", "unsigned", "1",
           "pipeline ranks; model stage s runs on rank s % ranks">,
    Option<"splitWeightGradients", "split-weight-gradients", "bool",
           "false", "split weight gradients off the backward (zero bubble)">,
    ListOption<"slots", "slots", "unsigned",
               "the microbatches each rank holds at once under the schedule "
               "(one arena slot each; default 1)">,
  ];
}

def Fp8 : Pass<"moe-fp8", "ModuleOp"> {
  let summary = "run chosen GEMMs in FP8, with a scaling recipe";
  let description = [{
    Marks the GEMMs the policy selects to read their inputs in FP8 (OCP FP8,
    round to nearest even, saturating), emulated bit-exactly by the CPU
    backend: E4M3 activations and weights, and E5M2 gradients with
    per-tensor scales or E4M3 ones with blockwise scales. Runs on the
    forward function before moe-autodiff, whose VJPs carry the recipe to
    the backward GEMMs.

    Policy (`gemms`): `experts`, the grouped expert GEMMs (w1, w3, w2 and
    their gradients), where an MoE model spends most of its FLOPs; `none`,
    only the token dispatch (with `dispatch`). Scaling: `tensorwise` (one
    scale per GEMM input from its current amax), `delayed` (the same, from
    the largest amax of the last `amax-history` steps, as Transformer
    Engine; declares one `fp8_history` parameter per expert layer, which
    moe-optimizer's `moe.fp8_amax_update` moves on each step) or `blockwise`
    (per 1 x `block` activation block and `block` x `block` weight block, as
    DeepSeek-V3).

    Target: on one without FP8 tensor cores (`a100`, sm_80), FP8 cannot make
    a GEMM faster, only what travels smaller: the pass warns, leaves the
    GEMMs in full precision and sends the expert tokens as FP8 codes. The
    target's capability record (moe/Runtime/Capabilities.h) decides the
    rest: a recipe its backend lacks is an error naming it and the recipes
    the target has, and so are a blockwise block other than its `fp8_block`
    (128 on h100 and h200: cuBLASLt's block scaling) and expert widths that
    are not multiples of its `fp8_gemm_alignment`; FP8 dispatch its backend
    lacks is a warning (the CPU backend runs it).

    Example, `--moe-fp8="scaling=blockwise block=128"`:

    ```mlir
    %y = moe.experts %x, %w, %i, %w1, %w3, %w2
        {fp8 = #moe.fp8<blockwise>, fp8_block = 128 : i64} : ...
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"",
           "the forward function">,
    Option<"gemms", "gemms", "std::string", "\"experts\"",
           "which GEMMs run in FP8 (experts, none)">,
    Option<"scaling", "scaling", "std::string", "\"blockwise\"",
           "blockwise, tensorwise or delayed">,
    Option<"block", "block", "int64_t", "128",
           "the block of blockwise scaling and of the FP8 dispatch">,
    Option<"dispatch", "dispatch", "bool", "false",
           "send tokens to the experts as FP8 codes (expert parallelism)">,
    Option<"amaxHistory", "amax-history", "int64_t", "16",
           "delayed scaling: the past steps whose amaxes set a scale">,
    Option<"target", "target", "std::string", "\"cpu\"",
           "the hardware: cpu (emulation), a100, h100, h200">,
  ];
}

def ScheduleCollectives : Pass<"moe-schedule-collectives", "ModuleOp"> {
  let summary = "start gradient reductions and parameter gathers early";
  let description = [{
    On the per-rank step after moe-partition: moves every reduction
    (`moe.reduce_scatter`, `moe.all_reduce`) right after the op that makes
    its operand, so FSDP's gradient reductions run under the rest of the
    backward pass instead of at the optimizer (and the full-size gradients
    die there), and moves the all-gathers of each layer's parameters to
    where the previous layer's gathered weights are first read: a prefetch
    one layer ahead. The backends run a collective from its position to its
    first reader on their communication stream or thread. Values are
    unchanged. Not for pipelined steps, whose reductions wait for every
    microbatch. See lib/Transforms/ScheduleCollectives.cpp.

    Example, with FSDP over 2 ranks:

    ```mlir
    %g = moe.linear_grad_weight %dy, %x : ... -> tensor<256x64xf32>
    ...   // the rest of the backward
    %r = moe.reduce_scatter %g {axes = ["fsdp"], dim = 0 : i64, mesh = @mesh}
    ```
    becomes
    ```mlir
    %g = moe.linear_grad_weight %dy, %x : ... -> tensor<256x64xf32>
    %r = moe.reduce_scatter %g {axes = ["fsdp"], dim = 0 : i64, mesh = @mesh}
    ...   // the rest of the backward
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step">,
  ];
}

def RingAttention : Pass<"moe-ring-attention", "ModuleOp"> {
  let summary = "pass context parallelism's key/value blocks around a ring";
  let description = [{
    On the per-rank step after moe-partition: an attention whose queries
    are a block of a sequence split over `sequence_axes` (context
    parallelism) reads keys and values all-gathered over those axes, and
    its gradient reduce-scatters the key and value gradients back. Where
    `comm` asks for the ring, both read their rank's key/value blocks
    instead (`ring`): the ranks pass the blocks around, each transfer
    overlapping the attention of the block before (ring attention,
    Megatron-Core's and TorchTitan's), and the gradients' accumulators
    follow the blocks home, so the all-gathers and reduce-scatters go.
    `auto` takes the ring over more than two ranks or for multi-head
    attention, and keeps the all-gather for grouped-query attention over
    two ranks, whose few key/value heads make one gather cheaper than the
    ring's steps. Values are those of the gathered form up to the order of
    the sums. See lib/Transforms/RingAttention.cpp.

    Example, over cp = 2:

    ```mlir
    %kw = moe.all_gather %k {axes = ["cp"], dim = 1 : i64, mesh = @mesh}
        : (tensor<2x4x4xf32>) -> tensor<2x8x4xf32>
    %vw = moe.all_gather %v {axes = ["cp"], dim = 1 : i64, mesh = @mesh}
        : (tensor<2x4x4xf32>) -> tensor<2x8x4xf32>
    %o, %lse = moe.attention %q, %kw, %vw
        {num_heads = 2, num_kv_heads = 1, sequence_axes = ["cp"]} : ...
    ```
    becomes
    ```mlir
    %o, %lse = moe.attention %q, %k, %v
        {num_heads = 2, num_kv_heads = 1, ring, sequence_axes = ["cp"]}
        : (tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> ...
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step">,
    Option<"comm", "comm", "std::string", "\"auto\"",
           "ring, allgather, or auto (the compiler chooses)">,
  ];
}

def BucketReductions : Pass<"moe-bucket-reductions", "ModuleOp"> {
  let summary = "reduce gradients in buckets, one message each";
  let description = [{
    On the per-rank step after moe-schedule-collectives: runs of
    reductions over one group (`moe.all_reduce`s, or `moe.reduce_scatter`s
    along dimension 0) of one element type become one `moe.reduce_bucket`
    of up to `bucket-bytes` of inputs, placed where the run's last
    reduction was. A reduction joins a bucket only if no result of the
    bucket is read before it, so nothing waits for a later gradient: in
    practice the weight gradients, which only the optimizer reads, bucket
    as the backward pass makes them (DDP's and FSDP's buckets), and
    tensor-parallel partial sums, read at once, stay alone. Fewer, larger
    messages: each collective call costs a latency whatever its size.
    Values are unchanged (the sums are elementwise). Not for pipelined
    steps. See lib/Transforms/BucketReductions.cpp.

    Example, with data parallelism over 2 ranks:

    ```mlir
    %ga = moe.rmsnorm_grad ...
    %ra = moe.all_reduce %ga {axes = ["dp"], mesh = @mesh} : tensor<64xf32>
    %gb = moe.linear_grad_weight ...
    %rb = moe.all_reduce %gb {axes = ["dp"], mesh = @mesh} : tensor<64x64xf32>
    ```
    becomes
    ```mlir
    %ga = moe.rmsnorm_grad ...
    %gb = moe.linear_grad_weight ...
    %ra, %rb = moe.reduce_bucket %ga, %gb {axes = ["dp"], mesh = @mesh}
        : (tensor<64xf32>, tensor<64x64xf32>) -> (tensor<64xf32>, tensor<64x64xf32>)
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step">,
    Option<"bucketBytes", "bucket-bytes", "uint64_t", "25 << 20",
           "the most bytes of inputs in one bucket (0: no buckets)">,
  ];
}

def CountExpertLoads : Pass<"moe-count-expert-loads", "ModuleOp"> {
  let summary = "count each router's per-expert load for the metrics";
  let description = [{
    After every `moe.router` of the forward function that has no load
    counter yet, adds a `moe.expert_load` into a new zero `moe.param` of kind
    `expert_load` named after the router's gate weight
    (`<gate>.tokens_per_expert`), which `moe-optimizer` then clears at the
    end of each step (`moe.expert_load_update`). moe-run reports each
    layer's load from it (docs/semantics.md, "Expert load"). Routers that
    balance a selection bias have their counter from the expansion already.
    On a target whose backend lacks the counters (its capability record's
    `scored_routers`) nothing changes. See lib/Transforms/CountExpertLoads.cpp.

    Example:

    ```mlir
    %p, %w, %i = moe.router %logits {top_k = 2}
        : (tensor<8x64x4xf32>)
        -> (tensor<8x64x4xf32>, tensor<8x64x2xf32>, tensor<8x64x2xi32>)
    ```
    gains
    ```mlir
    moe.expert_load %i {load = @"model.layers.1.block_sparse_moe.gate.tokens_per_expert"}
        : tensor<8x64x2xi32>
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"",
           "the loss function">,
    Option<"target", "target", "std::string", "\"cpu\"",
           "the target whose backend must run the counters">,
  ];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def FuseGemmEpilogues : Pass<"moe-fuse-gemm-epilogues", "ModuleOp"> {
  let summary = "fold adds into the GEMMs that make one of their terms";
  let description = [{
    Replaces `moe.add %a, %p`, where `%p` is a `moe.linear` or
    `moe.linear_grad_input` read only by the add, by that GEMM with `%a` as
    its `addend`: BLAS adds the product to C in the epilogue that stores it
    (beta = 1), so the product is never written and read back on its own.
    That folds the residual adds into the projections that feed them, and
    the sums of a value's gradient contributions (q, k and v's, the
    residual stream's) into the GEMMs that make them. Of two GEMM terms the
    later one takes the earlier as its addend; the GEMM stays in place, so
    it fuses only where the addend is ready there, and no value lives
    longer. BF16 sums stay apart (the recipe rounds the product first).
    Runs on the per-rank step after moe-partition, so partial sums, which
    reach their adds through a collective, stay apart, and after
    moe-rematerialize, right before the memory plan. On a target whose backend lacks the
    accumulating GEMMs (its capability record's `gemm_epilogues`) nothing
    changes. See lib/Transforms/FuseGemmEpilogues.cpp.

    Example:

    ```mlir
    %o = moe.linear %attn, %wo
        : (tensor<8x64x64xf32>, tensor<64x64xf32>) -> tensor<8x64x64xf32>
    %h = moe.add %x, %o : tensor<8x64x64xf32>
    ```
    becomes
    ```mlir
    %h = moe.linear %attn, %wo, %x
        : (tensor<8x64x64xf32>, tensor<64x64xf32>, tensor<8x64x64xf32>)
        -> tensor<8x64x64xf32>
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step">,
    Option<"target", "target", "std::string", "\"cpu\"",
           "the target whose backend must run the accumulating GEMMs">,
  ];
}

def SaveExpertActivations : Pass<"moe-save-expert-activations", "ModuleOp"> {
  let summary = "keep the experts' up projections for their backward";
  let description = [{
    Gives every `moe.experts` of the step whose gradient `moe.experts_grad`
    reads the same tokens, routing and weights its second result, `hidden`
    (each assignment's `w1 x` and `w3 x`), and makes that gradient read it
    instead of recomputing two of the forward's three expert GEMMs.
    moe-rematerialize drops them again, layer by layer, where a memory
    budget needs the room. Expert-parallel layers (`expert_axes`) keep
    recomputing. Runs on the per-rank step, after moe-partition and before
    the pipeline cut, so the stages carry the rows like any other saved
    activation. See lib/Transforms/SaveExpertActivations.cpp.

    Example:

    ```mlir
    %y = moe.experts %x, %w, %i, %w1, %w3, %w2 : (...) -> tensor<8x64x64xf32>
    ...
    %dx, ... = moe.experts_grad %dy, %x, %w, %i, %w1, %w3, %w2 : ...
    ```
    becomes
    ```mlir
    %y, %h = moe.experts %x, %w, %i, %w1, %w3, %w2
        : (...) -> (tensor<8x64x64xf32>, tensor<8x64x2x2x128xf32>)
    ...
    %dx, ... = moe.experts_grad %dy, %x, %w, %i, %w1, %w3, %w2, %h : ...
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step">,
  ];
}

def Rematerialize : Pass<"moe-rematerialize", "ModuleOp"> {
  let summary = "recompute activations in the backward pass to fit a budget";
  let description = [{
    Fits one rank's memory (parameters, optimizer state, inputs and the
    arena the memory plan will need) into `budget` bytes by recomputing
    forward values right before the backward pass reads them, instead of
    keeping them alive in between. Op-level and selective: ops are chosen
    cheapest recompute FLOPs per freed byte first, and only as many as the
    budget needs (see lib/Transforms/Rematerialize.cpp). Recomputed ops
    carry `moe.recomputed`; the step records the FLOPs recomputed
    (`moe.recompute_flops`) and those of full recomputation. Fails with the
    numbers when even recomputing everything does not fit. Runs on the
    per-rank step, before moe-plan-memory.

    Example: `--moe-rematerialize="budget=4194304"` turns

    ```mlir
    %a = moe.swiglu %g, %u : tensor<8x64x128xf32>   // kept for backward
    ...
    %d = moe.linear_grad_weight %dy, %a : ...
    ```
    into a second `moe.swiglu %g, %u {moe.recomputed}` right before the
    `linear_grad_weight`.
  }];
  let options = [
    Option<"function", "function", "std::string", "\"train_step\"",
           "the training step">,
    Option<"budget", "budget", "uint64_t", "0",
           "bytes one rank may hold">,
  ];
}

def PrintShardingRules : Pass<"moe-print-sharding-rules", "ModuleOp"> {
  let summary = "print the factor rule of every op (a remark per op)";
  let description = [{
    Inspection: emits a remark on every op with its einsum-like sharding
    rule (ShardingRule.h), with pinned factors marked `!`, and an error on
    any op of the moe dialect whose rule does not fit its shapes.

    Example: `moe.linear %x, %w : (tensor<2x4x8xf32>, tensor<16x8xf32>) ->
    tensor<2x4x16xf32>` gets the remark
    `sharding rule: (*0, *1, k), (n, k) -> (*0, *1, n)`.
  }];
}

#endif // MOE_TRANSFORMS_PASSES_TD
