//===- TestProgram.h - small hand-built artifacts for tests -----*- C++ -*-===//
//
// What moec would emit for a toy model, built without the compiler so that
// the runtime's tests do not depend on it: a ProgramBuilder that assigns
// arena offsets, a tiny but complete training step, and a FlatBuffers
// writer producing the bytes of a .moebin file.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_ARTIFACT_TESTPROGRAM_H
#define MOE_UNITTESTS_ARTIFACT_TESTPROGRAM_H

#include "moe/Runtime/Program.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moe::rt::testing {

/// Appends buffers and instructions to a Program. Temporaries get their own,
/// never reused, 64-byte aligned arena range, which is always a valid plan.
class ProgramBuilder {
public:
  explicit ProgramBuilder(Program &program) : program(program) {}

  uint32_t parameter(const std::string &name, std::vector<int64_t> shape,
                     Init init, float initStd = 0.0f, bool weightDecay = true);
  /// The BF16 working copy "<name>.bf16" of parameter `master` (mixed
  /// precision), with its shape and split.
  uint32_t workingCopy(uint32_t master);
  /// The two AdamW moments of `param`, named as in PyTorch's state dict.
  std::pair<uint32_t, uint32_t> moments(uint32_t param);
  /// Zero-initialised state the step keeps (optimizer state kind), such as
  /// an FP8 amax history.
  uint32_t state(const std::string &name, std::vector<int64_t> shape,
                 std::vector<AxisList> split = {});
  uint32_t input(const std::string &name, DType dtype,
                 std::vector<int64_t> shape);
  uint32_t temporary(const std::string &name, std::vector<int64_t> shape,
                     DType dtype = DType::F32);

  size_t emit(Opcode opcode, std::vector<uint32_t> operands,
              std::vector<uint32_t> results, std::vector<int64_t> intAttrs = {},
              std::vector<float> floatAttrs = {});

  /// Partitions the program over a mesh (version 1.1).
  void mesh(AxisList axes, std::vector<int64_t> shape);
  /// The index of the group over `axes`, added on first use (as moec does).
  int64_t group(const AxisList &axes);
  /// Splits a parameter; call before moments(), which copy the split.
  void split(uint32_t buffer, std::vector<AxisList> split);

private:
  uint32_t add(Buffer buffer);

  Program &program;
};

/// Sizes of the tiny model.
struct TinyConfig {
  int64_t batch = 2, seq = 4, vocab = 8, hidden = 4;
  float maxNorm = 1.0f;
  int64_t warmup = 2, decay = 10;
  float peakLr = 1e-2f, minLr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weightDecay = 0.1f;
  /// The LM head and its loss as LinearCrossEntropy and its gradient
  /// (moe-fuse-linear-cross-entropy's form) instead of five instructions.
  bool fusedHead = false;
  /// The LM head reads the embedding table (tie_word_embeddings): no
  /// "lm_head.weight", and the table's gradient is the sum of the head's
  /// and the lookup's (Add).
  bool tiedHead = false;
  /// With tiedHead, the sum as two pipeline stages make it: two
  /// PipelineGradientSums of the halves and an AdamW of the table for each
  /// (makePipelinedTinyProgram puts the first of each on stage 0, the
  /// second on the last stage; the norm reads the first sum).
  bool sumOverStages = false;
};

/// One training step of a one-layer language model:
///   h = embed(tokens); n = rmsnorm(h); logits = n W^T; loss = ce(logits)
/// then the backward pass, the global grad norm with clipping, the learning
/// rate schedule and one AdamW update per parameter. Parameters:
/// "model.embed_tokens.weight" [V, H] (normal), "model.norm.weight" [H]
/// (ones, not decayed), "lm_head.weight" [V, H] (normal).
Program makeTinyProgram(const TinyConfig &config = {});

/// makeTinyProgram(config) in BF16 mixed precision (docs/precision.md):
/// each parameter gets a working copy "<name>.bf16" that the forward and
/// backward read and its AdamW rounds into; the activations h, n, logits
/// and their gradients dlogits, dn, dh are bf16; the weight gradients, the
/// loss and the optimizer's scalars stay f32.
Program makeBf16TinyProgram(const TinyConfig &config = {});

/// makeTinyProgram(config) as the step of one of `microbatches`
/// microbatches (version 1.2), over `stages` pipeline ranks ("pp", the
/// only mesh axis) when there are two: the embedding and its gradient on
/// stage 0, the norm, head and loss on stage 1 (one stage holds all when
/// there is one). `schedule` is the pipeline library's name of a schedule
/// kind ("1f1b", "gpipe", "zero-bubble"). With config.sumOverStages, the
/// table lives on both stages.
Program makePipelinedTinyProgram(int stages, int microbatches,
                                 const std::string &schedule = "1f1b",
                                 const TinyConfig &config = {});

/// Sizes of the one-layer MoE model.
struct MoeConfig {
  int64_t batch = 2, seq = 5, vocab = 11, hidden = 8, heads = 2, kvHeads = 1;
  int64_t experts = 4, topK = 2, ffn = 6;
  float capacityFactor = 0.0f, auxCoef = 0.01f;
  /// The experts keep their up projections for the backward
  /// (ExpertsWithHidden, ExpertsGradWithHidden) instead of recomputing them.
  bool keepHidden = false;
  /// Document masking: a "positions" input (each token's position in its
  /// document) that DocumentRope and DocumentAttention (and their
  /// gradients) read instead of Rope and Attention.
  bool documentMasking = false;
  /// Context parallelism's ring (0: none): a mesh {cp: ringRanks}, RoPE on
  /// each rank's block of the sequence (seq rows of seq * ringRanks) and
  /// RingAttention and its gradient over {cp}; seq must be even.
  int64_t ringRanks = 0;
};

/// One training step of a Mixtral-style decoder with a single layer, using
/// every opcode: pre-norm GQA attention with RoPE, a top-k router with the
/// load-balancing loss, SwiGLU experts, final norm and LM head, the full
/// backward pass (one in-place Add included), clipping and AdamW.
Program makeMoeProgram(const MoeConfig &config = {});

/// makeMoeProgram() with DeepSeek-V3's router on the same logits after the
/// update (ScoredRouter: sigmoid scores, a selection bias "router.bias", the
/// top-2 among the experts of the better of two groups, renormalised weights
/// scaled by 2.5) and its gradient, the load counted into "router.load" and the
/// bias balanced on it (ExpertLoad, ExpertLoadUpdate at rate 1e-3).
Program makeScoredRouterProgram();

/// The mesh of makeMeshProgram: dp x tp ranks.
struct MeshConfig {
  int64_t dp = 2, tp = 2;
  /// ZeRO-1 (3.9): also a whole parameter "z" [2 dp, 3] whose moments are
  /// its rows' blocks over {dp}: z_grad = Slice(z + 0, {dp}, 0), normed over
  /// {dp}, and ShardedAdamW updates z's block and gathers it over {dp}.
  bool zeroOne = false;
};

/// Buffers of makeMeshProgram on one rank.
struct MeshProgramSizes {
  static constexpr int64_t kBatch = 2, kSeq = 3, kVocab = 8, kTopK = 2;
};

/// A program partitioned over a dp x tp mesh that exercises every
/// collective and grouped reduction, for the verifier and for checking
/// multi-rank execution against single-rank kernels. Batch rows split over
/// {dp, tp} (2 rows of 3 tokens per rank). Split parameters (local shapes):
///   "table" [8 / tp, 8] over [{tp}, {}]; "w" [3, 4, 5] over [{}, {dp}, {}]
///   with AdamW moments; "v" [2, 4] over [{tp, dp}, {}]; "x" [2, 2 dp, 3]
///   over [{dp}, {}, {}]; "y" [2, 3, 2] over [{dp}, {}, {tp}] (read by the
///   norm only); "u" [5] not split (ones).
/// Temporaries (named as listed):
///   table_full = AllGather(table, {tp}, 0); logits = Embedding(tokens,
///   table_full); ce = CrossEntropy over {dp,tp}; aux = AuxLoss(logits)
///   over {dp,tp}; dlogits, dprobs: their gradients for dloss = 1;
///   w_full = AllGather(w, {dp}, 1); w_block = Slice(w_full, {dp}, 1);
///   v_full = AllGather(v, {tp,dp}, 0); v_sum = AllReduce(v, {dp});
///   x_scattered = ReduceScatter(x, {dp}, 1); (v_bucket, x_bucket,
///   u_bucket) = ReduceBucket(v, x, u) over {dp,tp};
///   (v_full_scattered, table_full_scattered) = ReduceBucket(v_full,
///   table_full, scatter) over {dp}; grad_norm = GlobalNorm of
///   (w, v, table, x, y, u) with their groups; AdamW updates w with
///   w_block.
Program makeMeshProgram(const MeshConfig &config = {});

/// The mesh and experts of makeExpertParallelProgram: dp x ep ranks, each
/// holding `localExperts` experts (E = localExperts * ep over the group).
struct ExpertParallelConfig {
  int64_t dp = 1, ep = 2;
  int64_t localExperts = 3, topK = 3;
  float capacityFactor = 0.0f;
  /// Mixed precision: x, y, dy and dx are BF16 buffers.
  bool bf16 = false;
};

/// Buffers of makeExpertParallelProgram on one rank.
struct ExpertParallelSizes {
  static constexpr int64_t kBatch = 2, kSeq = 5, kVocab = 16, kHidden = 8,
                           kFfn = 6;
};

/// The experts of a MoE layer distributed over the {ep} group of a dp x ep
/// mesh, as moec emits expert parallelism. Batch rows split over {dp, ep}
/// (2 rows of 5 tokens per rank). Parameters: "embed" [V, H], "gate"
/// [V, E] and "grad" [V, H] (whole, normal); "experts.{e}.w1" and ".w3"
/// [El, F, H], ".w2" [El, H, F], split [{ep}, {}, {}] (normal).
/// Temporaries (named as listed): x = Embedding(tokens, embed); logits =
/// Embedding(tokens, gate); probs, weights, ids = Router(logits);
/// y = Experts(x, weights, ids, w1, w3, w2) over {ep}; dy =
/// Embedding(tokens, grad); dx, dweights, dw1, dw3, dw2 = ExpertsGrad(dy,
/// x, weights, ids, w1, w3, w2) over {ep}; dw1_total, dw3_total, dw2_total
/// = their AllReduce over {dp}; ce = CrossEntropy(y, targets) over {dp, ep}
/// (targets must be < H); grad_norm of the totals; clip_coef; lr. No
/// AdamW: the parameters keep their initial values.
Program makeExpertParallelProgram(const ExpertParallelConfig &config = {});

/// The index of the buffer called `name`; aborts the test binary if none.
uint32_t bufferNamed(const Program &program, const std::string &name);
/// The index of the `nth` instruction with `opcode`; aborts if none.
size_t instructionWith(const Program &program, Opcode opcode, size_t nth = 0);

/// How another moec's op table differs from this build's, for writing the
/// files it would write.
struct ForeignOpTable {
  /// Two opcodes whose numbers the other table swaps: their instructions
  /// carry each other's number, recorded under their own names.
  std::optional<std::pair<Opcode, Opcode>> swapped;
  /// An opcode the other table lays out differently (its fingerprint).
  std::optional<Opcode> relaidOut;
  /// An opcode left out of the file's record.
  std::optional<Opcode> unrecorded;
  /// A number beyond this build's table that the other table has.
  std::optional<uint16_t> extraNumber;
};

/// The .moebin bytes of `program`, written with the FlatBuffers builder and
/// the "MOEB" identifier, exactly as the compiler's writer does (with
/// `foreign`, as a writer with that op table would; without a target when
/// its target is empty).
std::vector<uint8_t> serialize(const Program &program,
                               const ForeignOpTable &foreign = {});

/// Seals `bytes` with the checksum trailer of its content: appends one, or
/// with `sealed`, replaces the one it ends in (for tests that edit a file
/// and need the edit to reach the verifier).
void reseal(std::vector<uint8_t> &bytes, bool sealed = true);

} // namespace moe::rt::testing

#endif // MOE_UNITTESTS_ARTIFACT_TESTPROGRAM_H
