//===- Program.h - a verified per-rank training step ------------*- C++ -*-===//
//
// The runtime's own, flatbuffers-free copy of an artifact. It is only ever
// produced by readArtifact(), which verified every index, shape and attribute,
// so the executor and the kernels can trust it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_PROGRAM_H
#define MOE_RUNTIME_PROGRAM_H

#include "moe/Runtime/DType.h"
// The Opcode enum, generated from the op table (Artifact/OpTable.td).
#include "moe/Runtime/Artifact/Opcode.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt {

/// The artifact version this runtime reads (major must match, minor <=).
/// 2.0 is 1.4 sealed by a checksum trailer (Artifact/Seal.h); 3.0 types
/// buffers (DType.h: f32, bf16, f16, FP8 E4M3/E5M2, i32, i64), encodes the
/// attributes as the op table (Artifact/OpTable.td) defines them and records
/// that table and the target it was compiled for; 3.1 adds BF16 storage and
/// 3.2 the experts' saved up projections (ExpertsWithHidden), 3.3 gradient
/// buckets (ReduceBucket), 3.4 the LM head fused with its loss
/// (LinearCrossEntropy) and GEMM epilogues (LinearAccumulate), 3.5 routers
/// with any selection rule (ScoredRouter), 3.6 the sequence-wise balance
/// loss and the router z-loss (SequenceAuxLoss, ZLoss) and multi-head latent
/// attention's pieces, 3.7 a parameter held by two pipeline stages
/// (PipelineGradientSum) and document masking, 3.8 ring attention, 3.9
/// ZeRO-1's sharded optimizer (ShardedAdamW), 3.10 scaled RoPE (the rope
/// opcodes' rope_scaling attributes) and the attention opcodes' softmax
/// scale_factor.
inline constexpr uint16_t kArtifactVersionMajor = 3;
inline constexpr uint16_t kArtifactVersionMinor = 10;
/// The oldest minor version of this major one the runtime reads: 3.0's op
/// table allowed no BF16, so its per-opcode fingerprints no longer match.
inline constexpr uint16_t kOldestArtifactVersionMinor = 1;

/// The largest init_std of a normal-initialised buffer (moe.transformer and
/// moe.param use the same bound).
inline constexpr float kMaxInitStd = 1.0f;

/// The alignment of every arena offset and of all runtime storage. The
/// compiler's memory planner uses the same constant, so that an offset it
/// plans is aligned in the runtime's arena too.
inline constexpr uint64_t kArenaAlignment = 64;
static_assert(kArenaAlignment % kMaxDTypeBytes == 0,
              "an aligned offset must be aligned for every dtype");

enum class BufferKind : uint8_t {
  Parameter = 0,
  OptimizerState = 1,
  Input = 2,
  Temporary = 3,
  /// The BF16 working copy of a Parameter (Buffer::master), derived from it.
  WorkingCopy = 4
};
enum class Init : uint8_t { None = 0, Zeros = 1, Ones = 2, Normal = 3 };


/// Mesh axis names: the axes one tensor dimension is split over, or the axes
/// a group spans (the ranks that differ only on them).
using AxisList = std::vector<std::string>;

/// The context-parallel mesh axis: a dimension it splits (the sequence) is
/// split load-balanced (semantics::balancedRuns), version 3.8.
inline constexpr const char *kContextAxis = "cp";

/// The opcode's name in the op table ("Linear", "AdamW", ...).
const char *opcodeName(Opcode opcode);

/// Whether the opcode is an AdamW update: AdamW or ZeRO-1's ShardedAdamW.
/// Both take param, grad, exp_avg, exp_avg_sq, lr, grad_scale, step and an
/// optional working copy, in that order.
inline bool isAdamW(Opcode opcode) {
  return opcode == Opcode::AdamW || opcode == Opcode::ShardedAdamW;
}

struct Buffer {
  std::string name;
  BufferKind kind = BufferKind::Temporary;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  Init init = Init::None;
  float initStd = 0.0f;
  bool weightDecay = false;
  /// Parameters and optimizer state split over the mesh: the axes of each
  /// dimension (one entry per dimension), and `shape` is this rank's block.
  /// Empty when the buffer is whole on every rank.
  std::vector<AxisList> split;
  /// WorkingCopy only: the index of the Parameter it is a copy of.
  uint32_t master = 0;

  int64_t numElements() const;
  /// Elements times the dtype's size (the verifier bounds the product).
  uint64_t sizeInBytes() const { return numElements() * dtypeBytes(dtype); }
};

/// An instruction as the artifact encodes it: its operands, results and
/// attributes are laid out as the op table (Artifact/OpTable.td) defines;
/// code reads them by name through the generated views (Artifact/OpViews.h).
struct Instruction {
  Opcode opcode = Opcode::Add;
  std::vector<uint32_t> operands;
  std::vector<uint32_t> results;
  std::vector<int64_t> intAttrs;
  std::vector<float> floatAttrs;
  std::string location;
};

struct ModelInfo {
  std::string name;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0;
  int64_t experts = 0, topK = 0, ffn = 0, batch = 0, seq = 0;
  int64_t totalParams = 0, activeParams = 0;
  double flopsPerStep = 0;
  /// Model and optimizer settings as JSON, as moec wrote them.
  std::string configJson;
};

/// What part of a pipelined step an instruction belongs to.
enum class PipelinePhase : uint8_t {
  /// The forward pass of one microbatch through one model stage.
  Forward = 0,
  /// The backward pass: input gradients (and, unless split off, the rest).
  Backward = 1,
  /// Weight gradients split off the backward (zero-bubble schedules).
  BackwardWeight = 2,
  /// Once per step after all microbatches: gradient norm, clipping, AdamW.
  Optimizer = 3,
};

/// One action of a pipeline schedule (mirrors moe::pipeline::Action; the
/// runtime keeps its own copy so the artifact format owns its encoding).
struct PipelineAction {
  enum class Kind : uint8_t {
    Forward = 0,
    BackwardInput = 1,
    BackwardWeight = 2,
    Backward = 3
  };
  Kind kind = Kind::Forward;
  int32_t chunk = 0;      // the rank's chunk: model stage chunk * stages + rank
  int32_t microbatch = 0;
};

/// A step split into microbatches and, over a "pp" mesh axis, into pipeline
/// stages (version 1.2). Absent (microbatches == 0) for a plain step.
struct Pipeline {
  int32_t stages = 1;        // ranks along the "pp" axis, mesh axis 0
  int32_t virtualStages = 1; // model chunks per rank
  int32_t microbatches = 0;  // gradients accumulate over them
  std::string schedule;      // "1f1b", ... for reports
  /// Per instruction: its model stage (the chunk holding it; -1 for the
  /// optimizer instructions every stage runs) and its phase.
  std::vector<int32_t> instructionStage;
  std::vector<PipelinePhase> instructionPhase;
  /// ranks[r]: the actions pipeline rank r runs, in order.
  std::vector<std::vector<PipelineAction>> ranks;

  bool enabled() const { return microbatches > 0; }
  /// Whether pipeline rank `rank` runs instruction `instruction`: its
  /// stage's rank (stage % stages), or every rank for stage -1.
  bool runsOn(size_t instruction, int32_t rank) const {
    int32_t stage = instructionStage[instruction];
    return stage < 0 || stage % stages == rank;
  }
  int32_t modelStages() const { return stages * virtualStages; }
};

struct Program {
  uint16_t versionMajor = 0, versionMinor = 0;
  std::string producer;
  ModelInfo model;
  std::vector<Buffer> buffers;
  std::vector<Instruction> instructions;
  uint64_t arenaBytes = 0;
  uint32_t tokens = 0, targets = 0, step = 0;
  /// Document masking (version 3.7): the input of each token's position in
  /// its document, i32 [B, S], fed with the tokens and targets; -1: none.
  int64_t positions = -1;
  uint32_t loss = 0, gradNorm = 0, lr = 0;
  uint64_t seed = 0;
  /// The mesh the step is partitioned over (no axes: one rank), the groups
  /// the collectives and grouped reductions name by index, and the axes
  /// splitting the batch (dimension 0 of tokens and targets).
  AxisList meshAxes;
  std::vector<int64_t> meshShape;
  std::vector<AxisList> groups;
  AxisList batchAxes;
  /// Microbatches and pipeline stages (version 1.2).
  Pipeline pipeline;
  /// The moec --target it was compiled for (version 3.0).
  std::string target = "cpu";

  /// The ranks the step runs on: the product of the mesh shape.
  int64_t numRanks() const;
  /// The product of the sizes of `axes`, which must be axes of the mesh
  /// (the verifier checks every list of axes a program holds).
  int64_t partsOf(const AxisList &axes) const;
  /// The cp size when `axes` split a dimension by context parallelism's
  /// load-balanced split (cp, of size > 1, leads them:
  /// semantics::balancedRuns), else 1.
  int64_t balancedSplitOf(const AxisList &axes) const;
  /// For each buffer, the last instruction writing it (-1: none).
  std::vector<int64_t> lastWriters() const;
  /// "dp=2 x tp=2", or "1 rank" for a program without a mesh.
  std::string meshDescription() const;
};

/// "instruction 3 (Embedding) at loc", for runtime errors.
std::string describeInstruction(const Program &program, size_t index);
/// "position 5 (batch 1, seq 1)" for ids laid out as [B, S], a plain
/// "position 5" otherwise.
std::string describeIdPosition(const Buffer &ids, int64_t position);

} // namespace moe::rt

#endif // MOE_RUNTIME_PROGRAM_H
