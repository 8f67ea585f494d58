//===- MoEBase.td - the moe dialect ------------------------*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEBASE_TD
#define MOE_DIALECT_MOE_IR_MOEBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def MoE_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::mlir::moe";
  let summary = "Mixture-of-Experts transformer training";
  let description = [{
    The `moe` dialect describes the training step of a decoder-only
    Mixture-of-Experts transformer with HF Mixtral semantics
    (docs/semantics.md). It has three levels:

    * `moe.transformer`, a config-level description (vocab, hidden, layers,
      heads, experts, ...) that `moe-expand-transformer` expands;
    * model ops on static-shaped fp32 tensors (`moe.embedding`,
      `moe.rms_norm`, `moe.linear`, `moe.rope`, `moe.attention`,
      `moe.router`, `moe.experts`, `moe.cross_entropy`, ...) over parameters
      declared as module-level symbols (`moe.param`);
    * gradient and optimizer ops (`moe.linear_grad_input`, `moe.adamw_update`,
      ...) that `moe-autodiff` and `moe-optimizer` derive.

    Every op of the dialect refuses attributes it does not know (listing
    its own), and the dialect refuses `moe.*` attributes, on any op,
    function argument or result, that no pass writes or of another type
    than the pass writes (listing the known ones). Every tensor an op reads,
    makes or declares has at most 2^48 elements.

    Example (one RMSNorm of a parameter-backed model):

    ```mlir
    moe.param @"model.norm.weight" : tensor<64xf32> {init = #moe.init<ones>}
    func.func @forward(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
      %w = moe.get_param @"model.norm.weight" : tensor<64xf32>
      %y = moe.rms_norm %x, %w {epsilon = 1.0e-5 : f32}
          : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
      return %y : tensor<2x8x64xf32>
    }
    ```
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  // Discardable `moe.*` attributes on any op, function argument or result
  // must be ones moec's passes write (MoENames.h), of the type they write.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

def MoE_InitKind : I32EnumAttr<"InitKind", "how a parameter is initialised", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"zeros", 1>,
  I32EnumAttrCase<"ones", 2>,
  I32EnumAttrCase<"normal", 3>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::moe";
}

def MoE_InitKindAttr : EnumAttr<MoE_Dialect, MoE_InitKind, "init"> {
  let summary = "initialisation of a parameter";
  let assemblyFormat = "`<` $value `>`";
}

def MoE_ParamKind : I32EnumAttr<"ParamKind", "what a parameter symbol holds", [
  I32EnumAttrCase<"weight", 0>,
  I32EnumAttrCase<"optimizer_state", 1>,
  I32EnumAttrCase<"fp8_history", 2>,
  I32EnumAttrCase<"working_copy", 3>,
  // DeepSeek-V3's e_score_correction_bias: steers a router's selection,
  // moved by moe.expert_load_update, never differentiated.
  I32EnumAttrCase<"router_bias", 4>,
  // A router's per-expert token counts of the current step
  // (moe.expert_load adds, moe.expert_load_update reads and clears).
  I32EnumAttrCase<"expert_load", 5>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::moe";
}

def MoE_ParamKindAttr : EnumAttr<MoE_Dialect, MoE_ParamKind, "param_kind"> {
  let summary = "role of a parameter symbol";
  let assemblyFormat = "`<` $value `>`";
}

def MoE_Fp8Scaling : I32EnumAttr<"Fp8Scaling",
    "how the inputs of FP8 GEMMs are scaled", [
  I32EnumAttrCase<"tensorwise", 1>,
  I32EnumAttrCase<"blockwise", 2>,
  I32EnumAttrCase<"delayed", 3>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::moe";
}

def MoE_Fp8ScalingAttr : EnumAttr<MoE_Dialect, MoE_Fp8Scaling, "fp8"> {
  let summary = "FP8 scaling of a GEMM's inputs";
  let description = [{
    The GEMMs of an op with this attribute read their inputs rounded to FP8
    with per-tensor scales (`tensorwise`, from the current amax: E4M3
    activations and weights, E5M2 gradients, Transformer Engine's hybrid
    recipe) or per-block scales (`blockwise`: 1 x block rows of activations
    and gradients, block x block squares of weights, all E4M3 as in
    DeepSeek-V3). `delayed` is Transformer Engine's default recipe: per-tensor
    scales as `tensorwise`, each from the largest amax of the tensor's last
    steps, kept in an amax history (`fp8_history`, a `moe.param` of kind
    `fp8_history`) instead of the tensor's own.

    Example: `fp8 = #moe.fp8<blockwise>, fp8_block = 128`.
  }];
  let assemblyFormat = "`<` $value `>`";
}

def MoE_RopeScalingKind : I32EnumAttr<"RopeScalingKind",
    "how RoPE's frequencies are stretched for a longer context", [
  I32EnumAttrCase<"linear", 1>,
  I32EnumAttrCase<"yarn", 2>,
  I32EnumAttrCase<"llama3", 3>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::moe";
}

def MoE_RouterScoring : I32EnumAttr<"RouterScoring",
    "how a router turns gate logits into expert scores", [
  I32EnumAttrCase<"softmax", 0>,
  I32EnumAttrCase<"sigmoid", 1>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::moe";
}

def MoE_RouterScoringAttr : EnumAttr<MoE_Dialect, MoE_RouterScoring, "scoring"> {
  let summary = "the scoring function of a router";
  let description = [{
    `softmax`: the scores are the softmax of the logits over all experts
    (Mixtral, Qwen3-MoE, DeepSeek-V2). `sigmoid`: each expert's score is the
    sigmoid of its logit, independent of the others (DeepSeek-V3's
    `scoring_func = "sigmoid"`).

    Example: `scoring = #moe.scoring<sigmoid>`.
  }];
  let assemblyFormat = "`<` $value `>`";
}

def MoE_Precision : I32EnumAttr<"Precision",
    "the dtype a training step computes and stores activations in", [
  I32EnumAttrCase<"fp32", 0>,
  I32EnumAttrCase<"bf16", 1>
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::moe";
}

def MoE_PrecisionAttr : EnumAttr<MoE_Dialect, MoE_Precision, "precision"> {
  let summary = "the precision of a training step";
  let description = [{
    `fp32`: every tensor is fp32. `bf16`: mixed precision with fp32 master
    weights (docs/precision.md): the forward and backward read a BF16
    working copy of each weight and keep activations and their gradients in
    BF16; GEMMs accumulate in fp32; router logits and probabilities,
    attention statistics and losses stay fp32; the optimizer state and
    update are fp32.

    Example: `precision = #moe.precision<bf16>`.
  }];
  let assemblyFormat = "`<` $value `>`";
}

// Every float attribute of a moe op (hyper-parameters, coefficients, fill
// values) must be finite: the runtime would otherwise compute garbage.
def MoE_FiniteFloatAttributes : NativeOpTrait<"FiniteFloatAttributes"> {
  let cppNamespace = "::mlir::moe";
}

// A moe op carries its own (inherent) attributes and discardable `moe.*`
// ones only: an attribute it does not know (`shared_experts = 1` on
// moe.transformer) is an error listing the known ones, not ignored.
def MoE_KnownAttributes : NativeOpTrait<"KnownAttributes"> {
  let cppNamespace = "::mlir::moe";
}

// Every tensor a moe op reads, makes or declares has at most 2^48 elements
// (1 PiB of fp32), so that element and byte counts never overflow.
def MoE_BoundedTensors : NativeOpTrait<"BoundedTensors"> {
  let cppNamespace = "::mlir::moe";
}

class MoE_Op<string mnemonic, list<Trait> traits = []>
    : Op<MoE_Dialect, mnemonic, !listconcat(traits,
          [MoE_KnownAttributes, MoE_FiniteFloatAttributes,
           MoE_BoundedTensors])>;

// Tensors of the model: static shapes, fp32 values and int32 ids. Float
// tensors that mixed precision may store in BF16 are MoE_FloatTensor; those
// it keeps in fp32 (router logits and probabilities, attention statistics,
// losses and scalars, optimizer operands) are MoE_F32Tensor.
def MoE_F32Tensor : StaticShapeTensorOf<[F32]>;
def MoE_FloatTensor : StaticShapeTensorOf<[F32, BF16]>;
def MoE_I32Tensor : StaticShapeTensorOf<[I32]>;
def MoE_F32Scalar : 0DTensorOf<[F32]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getF32Type())";
}
def MoE_I32Scalar : 0DTensorOf<[I32]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getI32Type())";
}

#endif // MOE_DIALECT_MOE_IR_MOEBASE_TD
