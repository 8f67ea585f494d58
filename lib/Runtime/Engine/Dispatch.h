//===- Dispatch.h - run one instruction with the CPU kernels ----*- C++ -*-===//
//
// Private to the executor: maps an instruction onto its kernel call, with
// sizes taken from the (verified) buffer shapes and attributes taken from
// the instruction.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ENGINE_DISPATCH_H
#define MOE_LIB_RUNTIME_ENGINE_DISPATCH_H

#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Program.h"

#include "absl/status/status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moe::rt::comm {
class Group;
} // namespace moe::rt::comm

namespace moe::rt::io {
class Trace;
} // namespace moe::rt::io

namespace moe::rt::engine {

/// A rope instruction's scaled-RoPE attributes (unscaled when absent).
template <class View> cpu::RopeScaling ropeScalingOf(const View &op) {
  cpu::RopeScaling scaling;
  if (!op.scaling())
    return scaling;
  scaling.kind = static_cast<cpu::RopeScalingKind>(*op.scaling());
  scaling.factor = *op.factor();
  scaling.originalMaxPositions = *op.originalMaxPositions();
  scaling.betaFast = *op.betaFast();
  scaling.betaSlow = *op.betaSlow();
  scaling.truncate = *op.truncate();
  scaling.lowFreqFactor = *op.lowFreqFactor();
  scaling.highFreqFactor = *op.highFreqFactor();
  scaling.attentionFactor = *op.attentionFactor();
  return scaling;
}

/// What an instruction needs from the executor.
struct StepContext {
  const Program &program;
  /// The address of every buffer, by index.
  const std::vector<uint8_t *> &pointers;
  /// The communication group of each of the program's groups, by index.
  const std::vector<std::unique_ptr<comm::Group>> &groups;
  /// Space for collectives that pack or unpack strided blocks, as large as
  /// packElements() of the program.
  std::vector<float> &packScratch;
  /// A pipelined step's optimizer: the group over the pipeline stages, and
  /// the gradients other stages hold. The global norm adds their squares
  /// over the stages instead of reading them here.
  comm::Group *stageGroup = nullptr;
  const std::vector<bool> *foreignGradients = nullptr;
  /// Where kernels and communication record their spans (moe-run --trace).
  io::Trace *trace = nullptr;
  /// Expert parallel instructions: chunks of tokens, and whether a
  /// communication thread moves chunk i + 1 while chunk i computes (needs
  /// an MPI that lets another thread call it).
  int64_t expertChunks = 1;
  bool overlapExperts = false;
  /// The MPI lets a second thread call it: instructions that pass blocks
  /// around (ring attention) move the next while computing this one.
  bool threadsMayCommunicate = false;
  /// The program with its BF16 buffers declared F32 (widenBf16Buffers),
  /// for instructions run on fp32 images of BF16 buffers; built on the
  /// fly when null.
  const Program *widened = nullptr;
  /// Set while an instruction runs on fp32 images (`program` is then the
  /// widened one): the program as written, whose dtypes say which results
  /// are stored in BF16.
  const Program *declared = nullptr;
};

/// Whether buffer `b` is stored in BF16, also while its instruction runs on
/// an fp32 image of it.
bool storedAsBf16(const StepContext &context, uint32_t b);

/// Runs instruction `index`. Fails only on data the verifier cannot see
/// (token ids outside the embedding table, targets outside the vocabulary,
/// expert ids outside the experts of an expert-parallel group) and on
/// communication errors of collectives, grouped reductions and expert
/// exchanges.
absl::Status runInstruction(const StepContext &context, size_t index);

/// Block `g` of `length * parts` rows split over `axes` (`parts` ranks;
/// load-balanced when cp leads them, semantics::balancedRuns) as the
/// kernels' runs: rows of the block and their places in the whole.
std::vector<cpu::SequenceRun> sequenceBlockRuns(const Program &program,
                                                const AxisList &axes,
                                                int64_t length, int64_t g);

} // namespace moe::rt::engine

#endif // MOE_LIB_RUNTIME_ENGINE_DISPATCH_H
