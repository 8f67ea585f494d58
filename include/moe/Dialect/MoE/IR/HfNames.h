//===- HfNames.h - HF parameter names of each model family ------*- C++ -*-===//
//
// moe.transformer names its parameters as the HF checkpoint of its family
// does, so that weights map one to one. The families differ in their MoE
// layers only: Mixtral's block_sparse_moe with experts' w1/w3/w2, Qwen3-MoE's
// and DeepSeek-V3's mlp with gate_proj/up_proj/down_proj.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_DIALECT_MOE_IR_HFNAMES_H
#define MOE_DIALECT_MOE_IR_HFNAMES_H

#include "llvm/ADT/StringRef.h"

#include <string>

namespace mlir::moe {

struct HfNames {
  llvm::StringLiteral family;
  /// A MoE layer's module: its router is "<moeBlock>.gate", its experts
  /// "<moeBlock>.experts.{e}.<name>", its shared experts
  /// "<moeBlock>.shared_experts".
  llvm::StringLiteral moeBlock;
  /// The experts' SwiGLU projections: gate (silu), up, down.
  llvm::StringLiteral expertGate, expertUp, expertDown;
};

inline constexpr HfNames kHfFamilies[] = {
    {"mixtral", "block_sparse_moe", "w1", "w3", "w2"},
    {"qwen3_moe", "mlp", "gate_proj", "up_proj", "down_proj"},
    {"deepseek_v3", "mlp", "gate_proj", "up_proj", "down_proj"},
};

/// The names of `family`, or null for an unknown one.
inline const HfNames *hfNamesOf(llvm::StringRef family) {
  for (const HfNames &names : kHfFamilies)
    if (names.family == family)
      return &names;
  return nullptr;
}

/// "mixtral, qwen3_moe, deepseek_v3".
inline std::string knownFamilyList() {
  std::string list;
  for (const HfNames &names : kHfFamilies)
    list += (list.empty() ? "" : ", ") + names.family.str();
  return list;
}

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_HFNAMES_H
