//===- ExpertsRecipe.h - the attributes Experts and ExpertsGrad share -*- C++ -*-===//
//
// Experts and ExpertsGrad carry the same optional attributes (OpTable.td):
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
};

/// The recipe of an Experts or ExpertsGrad instruction; nullopt for others.
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
  if (inst.opcode == Opcode::Experts)
    return read(ExpertsView(inst), {});
  if (inst.opcode == Opcode::ExpertsGrad) {
    ExpertsRecipe recipe;
    recipe.forward = false;
    return read(ExpertsGradView(inst), recipe);
  }
  return std::nullopt;
}

} // namespace moe::rt::ops

#endif // MOE_RUNTIME_ARTIFACT_EXPERTSRECIPE_H
