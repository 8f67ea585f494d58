//===- Program.h - a verified per-rank training step ------------*- C++ -*-===//
//
// The runtime's own, flatbuffers-free copy of an artifact. It is only ever
// produced by readArtifact(), which verified every index, shape and attribute,
// so the executor and the kernels can trust it.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_PROGRAM_H
#define MOE_RUNTIME_PROGRAM_H

#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt {

/// The artifact version this runtime reads (major must match, minor <=).
inline constexpr uint16_t kArtifactVersionMajor = 1;
inline constexpr uint16_t kArtifactVersionMinor = 1;

/// The alignment of every arena offset and of all runtime storage. The
/// compiler's memory planner uses the same constant, so that an offset it
/// plans is aligned in the runtime's arena too.
inline constexpr uint64_t kArenaAlignment = 64;

enum class DType : uint8_t { F32 = 0, I32 = 1 };
enum class BufferKind : uint8_t {
  Parameter = 0,
  OptimizerState = 1,
  Input = 2,
  Temporary = 3
};
enum class Init : uint8_t { None = 0, Zeros = 1, Ones = 2, Normal = 3 };

/// Mirrors moe.artifact.Opcode (include/moe/Runtime/Artifact/Program.fbs).
enum class Opcode : uint16_t {
  Embedding = 0,
  EmbeddingGrad,
  RmsNorm,
  RmsNormGrad,
  Linear,
  LinearGradInput,
  LinearGradWeight,
  Rope,
  RopeGrad,
  Attention,
  AttentionGrad,
  Router,
  RouterGrad,
  Experts,
  ExpertsGrad,
  Swiglu,
  SwigluGrad,
  Add,
  CrossEntropy,
  CrossEntropyGrad,
  AuxLoss,
  AuxLossGrad,
  WeightedSum,
  Constant,
  GlobalNorm,
  ClipCoefficient,
  LearningRate,
  AdamW,
  // Collectives over a group of the mesh (version 1.1).
  AllReduce,
  AllGather,
  ReduceScatter,
  Slice,
};
inline constexpr int kNumOpcodes = static_cast<int>(Opcode::Slice) + 1;

/// Mesh axis names: the axes one tensor dimension is split over, or the axes
/// a group spans (the ranks that differ only on them).
using AxisList = std::vector<std::string>;

/// The opcode's name as written in the schema ("Linear", "AdamW", ...).
const char *opcodeName(Opcode opcode);

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

  int64_t numElements() const;
  uint64_t sizeInBytes() const { return numElements() * 4; }
};

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

struct Program {
  uint16_t versionMajor = 0, versionMinor = 0;
  std::string producer;
  ModelInfo model;
  std::vector<Buffer> buffers;
  std::vector<Instruction> instructions;
  uint64_t arenaBytes = 0;
  uint32_t tokens = 0, targets = 0, step = 0;
  uint32_t loss = 0, gradNorm = 0, lr = 0;
  uint64_t seed = 0;
  /// The mesh the step is partitioned over (no axes: one rank), the groups
  /// the collectives and grouped reductions name by index, and the axes
  /// splitting the batch (dimension 0 of tokens and targets).
  AxisList meshAxes;
  std::vector<int64_t> meshShape;
  std::vector<AxisList> groups;
  AxisList batchAxes;

  /// The ranks the step runs on: the product of the mesh shape.
  int64_t numRanks() const;
  /// The product of the sizes of `axes`, which must be axes of the mesh
  /// (the verifier checks every list of axes a program holds).
  int64_t partsOf(const AxisList &axes) const;
  /// "dp=2 x tp=2", or "1 rank" for a program without a mesh.
  std::string meshDescription() const;
};

} // namespace moe::rt

#endif // MOE_RUNTIME_PROGRAM_H
