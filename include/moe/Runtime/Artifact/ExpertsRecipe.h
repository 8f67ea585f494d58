//===- ExpertsRecipe.h - the attributes Experts and ExpertsGrad share -*- C++
//-*-===//
//
// Experts and ExpertsGrad (and their WithHidden forms, which keep the up
// projections) carry the same optional attributes (OpTable.td):
// the group distributing the experts and the FP8 recipe. Code that handles
// both reads them here, through the ops' views.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ARTIFACT_EXPERTSRECIPE_H
#define MOE_RUNTIME_ARTIFACT_EXPERTSRECIPE_H

#include "moe/Runtime/Artifact/OpViews.h"

namespace moe::rt::ops {

struct ExpertsRecipe {
  bool forward = true;
  /// x's operand position: ExpertsGrad's operands are Experts' after dy.
  size_t firstOperand = 0;
  /// The group the experts are distributed over (expert parallelism).
  std::optional<int64_t> group;
  /// The FP8 recipe, when there is one.
  std::optional<Fp8Scaling> fp8Scaling;
  int64_t fp8Block = 0;
  bool fp8Dispatch = false;
  /// Delayed scaling's amax history.
  std::optional<uint32_t> amaxHistory;
  /// The saved up projections [..., k, 2, F]: a result of the forward
  /// (ExpertsWithHidden), an operand of the backward
  /// (ExpertsGradWithHidden); absent where the backward recomputes them.
  std::optional<uint32_t> hidden;
};

/// The recipe of an instruction of the experts (Experts, ExpertsGrad and
/// their WithHidden forms); nullopt for others.
inline std::optional<ExpertsRecipe> expertsRecipeOf(const Instruction &inst) {
  auto read = [](const auto &op, ExpertsRecipe recipe) {
    recipe.firstOperand = op.kXOperand;
    recipe.group = op.group();
    recipe.fp8Scaling = op.fp8Scaling();
    recipe.fp8Block = op.fp8Block().value_or(0);
    recipe.fp8Dispatch = op.fp8Dispatch().value_or(false);
    recipe.amaxHistory = op.amaxHistory();
    return recipe;
  };
  ExpertsRecipe backward;
  backward.forward = false;
  switch (inst.opcode) {
  case Opcode::Experts:
    return read(ExpertsView(inst), {});
  case Opcode::ExpertsGrad:
    return read(ExpertsGradView(inst), backward);
  case Opcode::ExpertsWithHidden: {
    ExpertsWithHiddenView op(inst);
    ExpertsRecipe recipe = read(op, {});
    recipe.hidden = op.hidden();
    return recipe;
  }
  case Opcode::ExpertsGradWithHidden: {
    ExpertsGradWithHiddenView op(inst);
    ExpertsRecipe recipe = read(op, backward);
    recipe.hidden = op.hidden();
    return recipe;
  }
  default:
    return std::nullopt;
  }
}

} // namespace moe::rt::ops

#endif // MOE_RUNTIME_ARTIFACT_EXPERTSRECIPE_H
