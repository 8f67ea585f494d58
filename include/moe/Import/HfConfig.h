//===- HfConfig.h - HF config.json to moe.transformer -----------*- C++ -*-===//
//
// moe-import hf: the moe.transformer of a Hugging Face config.json for
// MixtralForCausalLM, Qwen3MoeForCausalLM and DeepseekV3ForCausalLM (also
// under Kimi-K2's model_type kimi_k2). Every
// field is mapped, checked against the one value moec implements, or known
// to leave the training step alone (token ids, dtype, versions); any other
// field is an error naming it, as is a value moec does not implement.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_IMPORT_HFCONFIG_H
#define MOE_IMPORT_HFCONFIG_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mlir::moe {

struct HfImportOptions {
  /// Sequences per step and tokens per sequence (defaults: 8, and 4096
  /// capped at max_position_embeddings).
  std::optional<int64_t> batch, seq;
  /// Fields the user accepts to drop, each named on the command line
  /// (moe-import --ignore FIELD): a model without them.
  std::set<std::string> ignored;
  /// DeepSeek-V3's bias update rate (HF's config has none; its report
  /// trained with 1e-3).
  float biasUpdateRate = 1e-3f;
  /// Train HF's load-balancing loss (router_aux_loss_coef) even where
  /// output_router_logits is false, as the published Mixtral and Qwen3
  /// configs say (moe-import --router-aux-loss).
  bool routerAuxLoss = false;
};

/// What the import decided beyond the mapping, for the output's header.
struct HfImport {
  std::string architecture;
  std::vector<std::string> notes;
};

/// Appends the moe.transformer of `config` (read from `origin`, named in
/// errors) to `module`. On failure, `error` holds one line per problem,
/// each naming `origin` and the HF field (or the flag) and its value.
FailureOr<HfImport> importHfConfig(const llvm::json::Object &config,
                                   const std::string &origin,
                                   const HfImportOptions &options,
                                   ModuleOp module, std::string &error);

} // namespace mlir::moe

#endif // MOE_IMPORT_HFCONFIG_H
