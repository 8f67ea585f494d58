//===- Program.cpp - opcode names and buffer sizes ------------------------===//
//
// The small helpers of moe::rt::Program that every runtime component needs:
// readable opcode names for messages and a buffer's element count.
//
//===----------------------------------------------------------------------===//

#include "moe/Runtime/Program.h"

namespace moe::rt {

const char *opcodeName(Opcode opcode) {
  // Indexed by the opcode's value; the order is the schema's (Program.fbs).
  static constexpr const char *kNames[] = {
      "Embedding",        "EmbeddingGrad",
      "RmsNorm",          "RmsNormGrad",
      "Linear",           "LinearGradInput",
      "LinearGradWeight", "Rope",
      "RopeGrad",         "Attention",
      "AttentionGrad",    "Router",
      "RouterGrad",       "Experts",
      "ExpertsGrad",      "Swiglu",
      "SwigluGrad",       "Add",
      "CrossEntropy",     "CrossEntropyGrad",
      "AuxLoss",          "AuxLossGrad",
      "WeightedSum",      "Constant",
      "GlobalNorm",       "ClipCoefficient",
      "LearningRate",     "AdamW",
  };
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumOpcodes,
                "every opcode needs a name");
  auto index = static_cast<size_t>(opcode);
  // An artifact's opcode is only range-checked by the verifier, which itself
  // needs a name for the out-of-range value it reports.
  if (index >= static_cast<size_t>(kNumOpcodes))
    return "<invalid opcode>";
  return kNames[index];
}

int64_t Buffer::numElements() const {
  // The verifier rejects negative dims and products that overflow, so a
  // plain product is exact for every buffer the runtime ever sees.
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

} // namespace moe::rt
