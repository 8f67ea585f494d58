//===- MoEInterfaces.td - interfaces of the moe dialect ----*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEINTERFACES_TD
#define MOE_DIALECT_MOE_IR_MOEINTERFACES_TD

include "mlir/IR/OpBase.td"

def MoE_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::mlir::moe";
  let description = [{
    An op with a vector-Jacobian product rule. `moe-autodiff` walks a forward
    function in reverse and asks each op for the gradients of its operands
    given the gradients of its results (docs/semantics.md, "Backward").
    A null result gradient means "no gradient flows here" (the value is not
    on a path to the loss); a null operand gradient means the operand is
    not differentiable (ids, indices) or receives nothing.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/[{
        Builds the ops computing the operand gradients at the builder's
        insertion point. `resultGrads` has one entry per result (null where
        none flows); the returned vector has one entry per operand.
      }],
      /*retTy=*/"::llvm::SmallVector<::mlir::Value>",
      /*methodName=*/"buildVJP",
      /*args=*/(ins "::mlir::OpBuilder &":$builder,
                    "::mlir::ValueRange":$resultGrads)
    >
  ];
}

def MoE_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::moe";
  let description = [{
    An op that states how its operand and result dimensions are made of
    einsum-like factors (ShardingRule.h). Sharding propagation and
    partitioning reason about factors only, so they need no per-op code.
  }];
  let methods = [
    InterfaceMethod<
      /*desc=*/"The factor rule of this op.",
      /*retTy=*/"::mlir::FailureOr<::mlir::moe::ShardingRule>",
      /*methodName=*/"getShardingRule"
    >
  ];
}

#endif // MOE_DIALECT_MOE_IR_MOEINTERFACES_TD
