//===- HfCheckpoint.h - HF checkpoints onto any mesh -----------*- C++ -*-===//
//
// moe-run --load: the weights of a Hugging Face checkpoint (a directory with
// model.safetensors, or with model.safetensors.index.json and its shards,
// or one .safetensors file; F32, BF16, F16, or FP8 with block scales) under
// HF's names, onto the blocks this rank holds of any mesh.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_TRAIN_HFCHECKPOINT_H
#define MOE_RUNTIME_TRAIN_HFCHECKPOINT_H

#include "moe/Runtime/Backend/WeightStore.h"
#include "moe/Runtime/Train/Weights.h"

#include "absl/status/status.h"

#include <cstdint>
#include <optional>
#include <string>

namespace moe::rt::train {

/// HF DeepSeek-V3's rope_interleave layout: in each group of `groupRows`
/// rows of a projection (a head of q_b_proj or q_proj; kv_a_proj_with_mqa
/// whole), the `rope` rows from `offset` on hold the RoPE features as
/// interleaved pairs, where moec's RoPE rotates halves.
struct InterleavedRows {
  int64_t groupRows = 0, offset = 0, rope = 0;
  /// The checkpoint's row of moec's row `row` (its inverse is the same
  /// pairing read the other way).
  int64_t checkpointRow(int64_t row) const;
};

/// Which parameters of a model have interleaved rows in its checkpoint,
/// from the artifact's model config (rope_interleave and the MLA widths),
/// read once.
class InterleavedLayout {
public:
  explicit InterleavedLayout(const std::string &configJson);
  /// The interleaved rows of parameter `name`, or none.
  std::optional<InterleavedRows> rowsOf(const std::string &name) const;

private:
  bool interleaved = false;
  int64_t rope = 0, nope = 0, kvRank = 0;
};

/// Loads every parameter this rank holds, and DeepSeek-V3's selection
/// biases (gate.e_score_correction_bias, optimizer state here), from the
/// checkpoint at `path`. A rank opens only the shard files that hold its
/// tensors and decodes only the elements of its blocks. Stacked experts are
/// read from HF's per-expert tensors ("experts.{e}" with e a number) or one
/// stacked tensor. FP8 block-quantized weights (F8_E4M3 with
/// `_scale_inv`, as DeepSeek-V3's) are dequantized to BF16 values with the
/// block size of the quantization_config in the config.json beside the
/// checkpoint; the multi-token-prediction layers that config names
/// (num_nextn_predict_layers) are skipped, as HF skips them. Missing
/// tensors, shapes other than the model's, non-finite values and tensors
/// the model has no parameter for are errors naming the tensor and its
/// file.
absl::Status loadHfCheckpoint(WeightStore &store, const std::string &path);

/// moe-run --save: the parameters and the routers' selection biases (the
/// whole model, held by one rank) under HF's names and layout (one tensor
/// per expert, interleaved RoPE rows where the model records
/// rope_interleave) in `dtype`, to `path`: a .safetensors file, or a
/// directory (made if needed) whose model.safetensors it writes, beside
/// the config.json from_pretrained reads.
absl::Status saveHfCheckpoint(const WeightStore &store, const std::string &path,
                              SaveDType dtype);

} // namespace moe::rt::train

#endif // MOE_RUNTIME_TRAIN_HFCHECKPOINT_H
