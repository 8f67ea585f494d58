//===- HfRope.h - an HF config's RoPE and its scaling ----------*- C++ -*-===//
//
// Private to lib/Import.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_IMPORT_HFROPE_H
#define MOE_LIB_IMPORT_HFROPE_H

#include "ConfigReader.h"
#include "ImportAttributes.h"

#include "moe/Import/HfConfig.h"

namespace mlir::moe::import {

/// RoPE: transformers 5's rope_parameters, or 4's rope_theta and
/// rope_scaling (whose `type` transformers 5 reads as `rope_type`), as HF's
/// rotary embedding computes it: default, linear, yarn and llama3 become
/// #moe.rope_scaling (YaRN's attention factor resolved as HF resolves it);
/// dynamic NTK is unscaled RoPE for a step no longer than
/// max_position_embeddings, which the import requires (a note says so).
/// With `scalesSoftmax` (DeepSeek's attention, HF's yarn_apply_mscale),
/// mscale_all_dim also multiplies the softmax scale. `fallbackTheta` is
/// the class's default rope_theta.
void readRope(ConfigReader &reader, Attributes &attrs, HfImport &result,
              double fallbackTheta, bool scalesSoftmax);

} // namespace mlir::moe::import

#endif // MOE_LIB_IMPORT_HFROPE_H
