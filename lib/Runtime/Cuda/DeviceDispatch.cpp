//===- DeviceDispatch.cpp - run one instruction with the CUDA kernels -----===//
//
// One case per opcode, as lib/Runtime/Engine/Dispatch.cpp for the CPU; the
// verifier guarantees the shapes read here. A one-rank program's groups are
// groups of one, so collectives are copies and sums over ranks are the
// rank's own.
//
//===----------------------------------------------------------------------===//
#include "DeviceStep.h"

#include "DeviceBuffer.h"

#include "moe/Runtime/Comm/GroupSums.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/Cuda/Kernels.h"
#include "moe/Runtime/Engine/GlobalNorm.h"
#include "moe/Runtime/Engine/StepChecks.h"
#include "moe/Runtime/StepSemantics.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace moe::rt::cuda {
namespace {

class Operands {
public:
  Operands(const DeviceStep &step, size_t index)
      : step(step), instruction(step.program.instructions[index]) {}
  const Buffer &in(size_t i) const { return step.buffer(instruction.operands[i]); }
  const Buffer &out(size_t i) const { return step.buffer(instruction.results[i]); }
  float *inF(size_t i) const { return step.f32(instruction.operands[i]); }
  float *outF(size_t i) const { return step.f32(instruction.results[i]); }
  int32_t *inI(size_t i) const { return step.i32(instruction.operands[i]); }
  int32_t *outI(size_t i) const { return step.i32(instruction.results[i]); }
  int64_t intAttr(size_t i) const { return instruction.intAttrs[i]; }
  float floatAttr(size_t i) const { return instruction.floatAttrs[i]; }
  uint32_t operand(size_t i) const { return instruction.operands[i]; }
  uint32_t result(size_t i) const { return instruction.results[i]; }

  const DeviceStep &step;
  const Instruction &instruction;
};

int64_t last(const Buffer &buffer) { return buffer.shape.back(); }

/// The targets of a loss, read back: ids >= V are a data error (as on the
/// CPU); the count of those in [0, V) divides the mean.
absl::StatusOr<int64_t> countTargets(const Operands &ops, size_t index,
                                     size_t operand, int64_t vocab) {
  absl::StatusOr<std::vector<int32_t>> targets =
      ops.step.readIds(ops.operand(operand));
  if (!targets.ok())
    return targets.status();
  return engine::checkTargets(ops.step.program, index, ops.in(operand),
                              targets->data(), vocab);
}

/// The MPI group a loss's tokens are split over (its int attribute after
/// the `fixed` ones), or null when they are all on this rank.
comm::Group *tokenGroup(const Operands &ops, size_t fixed) {
  const std::vector<int64_t> &ints = ops.instruction.intAttrs;
  return ints.size() > fixed ? ops.step.mpiGroup(ints[fixed]) : nullptr;
}

absl::Status embedding(const Operands &ops, size_t index) {
  int64_t vocab = ops.in(1).shape[0], hidden = ops.in(1).shape[1];
  int64_t T = ops.in(0).numElements();
  MOE_DEVICE_BUFFER(int64_t, firstBad, 1, ops.step.stream);
  MOE_CUDA_TRY(embeddingForward(ops.inI(0), ops.inF(1), ops.outF(0), T, vocab,
                                hidden, firstBad.get(), ops.step.stream));
  int64_t bad = -1;
  MOE_CUDA_TRY(ops.step.read(firstBad.get(), 1, &bad));
  if (bad < 0)
    return absl::OkStatus();
  int32_t id = 0;
  MOE_CUDA_TRY(ops.step.read(ops.inI(0) + bad, 1, &id));
  return absl::InvalidArgumentError(absl::StrCat(
      describeInstruction(ops.step.program, index), ": token id ", id, " at ",
      describeIdPosition(ops.in(0), bad), " is outside the embedding table [0, ",
      vocab, ")"));
}

absl::Status crossEntropy(const Operands &ops, size_t index) {
  int64_t vocab = last(ops.in(0)), T = rowsOf(ops.in(0));
  absl::StatusOr<int64_t> count = countTargets(ops, index, 1, vocab);
  if (!count.ok())
    return count.status();
  MOE_DEVICE_BUFFER(double, sum, 1, ops.step.stream);
  MOE_DEVICE_BUFFER(unsigned long long, counted, 1, ops.step.stream);
  MOE_CUDA_OK(cudaMemsetAsync(sum.get(), 0, sizeof(double), ops.step.stream));
  MOE_CUDA_OK(cudaMemsetAsync(counted.get(), 0, sizeof(unsigned long long),
                              ops.step.stream));
  MOE_CUDA_TRY(crossEntropySums(ops.inF(0), ops.inI(1), T, vocab, sum.get(),
                                counted.get(), ops.step.stream));
  cpu::CrossEntropySums sums;
  MOE_CUDA_TRY(ops.step.read(sum.get(), 1, &sums.sum));
  sums.count = *count;
  // The mean over every rank's tokens: sums and counts add up first.
  if (comm::Group *group = tokenGroup(ops, 0))
    MOE_CUDA_TRY(comm::sumOverGroup(*group, absl::MakeSpan(&sums.sum, 1),
                                    absl::MakeSpan(&sums.count, 1)));
  return ops.step.writeScalar(ops.result(0), cpu::crossEntropyMean(sums));
}

absl::Status crossEntropyGrad(const Operands &ops, size_t index) {
  int64_t vocab = last(ops.in(1)), T = rowsOf(ops.in(1));
  absl::StatusOr<int64_t> count = countTargets(ops, index, 2, vocab);
  if (!count.ok())
    return count.status();
  int64_t total = *count;
  if (comm::Group *group = tokenGroup(ops, 0))
    MOE_CUDA_TRY(comm::sumOverGroup(*group, {}, absl::MakeSpan(&total, 1)));
  absl::StatusOr<float> dloss = ops.step.readScalar(ops.operand(0));
  if (!dloss.ok())
    return dloss.status();
  return crossEntropyBackward(*dloss, ops.inF(1), ops.inI(2), ops.outF(0), T,
                              vocab, total, ops.step.stream);
}

absl::Status auxLoss(const Operands &ops, bool forward) {
  const Buffer &probs = ops.in(forward ? 0 : 1);
  const float *p = ops.inF(forward ? 0 : 1);
  int64_t T = rowsOf(probs), E = last(probs), topK = ops.intAttr(0);
  cudaStream_t stream = ops.step.stream;
  MOE_DEVICE_BUFFER(unsigned long long, count, E, stream);
  MOE_DEVICE_BUFFER(double, probSum, E, stream);
  MOE_CUDA_TRY(auxLossStatistics(p, T, E, topK, count.get(), probSum.get(),
                                 stream));
  cpu::AuxLossStatistics stats;
  std::vector<unsigned long long> counts(E);
  stats.probSum.resize(E);
  MOE_CUDA_TRY(ops.step.read(count.get(), E, counts.data()));
  MOE_CUDA_TRY(ops.step.read(probSum.get(), E, stats.probSum.data()));
  stats.count.assign(counts.begin(), counts.end());
  stats.tokens = T;
  // Expert loads, probability sums and token counts over every rank's
  // tokens (the token count rides after the loads), as on the CPU.
  comm::Group *group = tokenGroup(ops, 1);
  if (group) {
    stats.count.push_back(stats.tokens);
    MOE_CUDA_TRY(comm::sumOverGroup(*group, absl::MakeSpan(stats.probSum),
                                    absl::MakeSpan(stats.count)));
    stats.tokens = stats.count.back();
    stats.count.pop_back();
  }
  if (forward)
    return ops.step.writeScalar(ops.result(0),
                                cpu::auxLossFromStatistics(stats));
  absl::StatusOr<float> dloss = ops.step.readScalar(ops.operand(0));
  if (!dloss.ok())
    return dloss.status();
  if (group) {
    counts.assign(stats.count.begin(), stats.count.end());
    MOE_CUDA_OK(cudaMemcpyAsync(count.get(), counts.data(),
                                E * sizeof(unsigned long long),
                                cudaMemcpyHostToDevice, stream));
    MOE_CUDA_OK(cudaStreamSynchronize(stream));
  }
  return auxLossBackward(*dloss, count.get(), stats.tokens, ops.outF(0), T, E,
                         stream);
}

absl::Status globalNorm(const Operands &ops) {
  size_t n = ops.instruction.operands.size();
  MOE_DEVICE_BUFFER(double, squares, n, ops.step.stream);
  MOE_CUDA_OK(cudaMemsetAsync(squares.get(), 0, n * sizeof(double),
                              ops.step.stream));
  for (size_t i = 0; i < n; ++i)
    MOE_CUDA_TRY(sumOfSquares(ops.inF(i), ops.in(i).numElements(),
                              squares.get() + i, ops.step.stream));
  std::vector<double> host(n);
  MOE_CUDA_TRY(ops.step.read(squares.get(), static_cast<int64_t>(n),
                             host.data()));
  // Over the groups and the pipeline stages, as on the CPU; one rank has
  // groups of one.
  std::function<comm::Group &(int64_t)> groupOf;
  if (ops.step.groups)
    groupOf = [&](int64_t g) -> comm::Group & { return *ops.step.mpiGroup(g); };
  absl::StatusOr<float> norm = engine::globalNormFromSquares(
      absl::MakeSpan(host), ops.instruction.intAttrs, groupOf,
      ops.step.stageGroup);
  if (!norm.ok())
    return norm.status();
  return ops.step.writeScalar(ops.result(0), *norm);
}

absl::Status adamwUpdate(const Operands &ops) {
  absl::StatusOr<float> lr = ops.step.readScalar(ops.operand(4));
  if (!lr.ok())
    return lr.status();
  int32_t step = 0;
  MOE_CUDA_TRY(ops.step.read(ops.inI(6), 1, &step));
  return adamw(ops.inF(0), ops.inF(1), ops.inF(5), ops.inF(2), ops.inF(3),
               ops.in(0).numElements(), *lr, ops.floatAttr(0),
               ops.floatAttr(1), ops.floatAttr(2), ops.floatAttr(3), step,
               ops.step.stream);
}

/// A tensor's blocks around dimension `dim` of one rank's block `shape`:
/// [outer, parts, chunk] (StepSemantics.h's layout, as on the CPU).
using Blocks = semantics::CollectiveBlocks;
Blocks blocksAround(const std::vector<int64_t> &shape, int64_t dim) {
  return semantics::blocksAround(shape.data(),
                                 static_cast<int64_t>(shape.size()), dim);
}

/// AllReduce, AllGather, ReduceScatter and Slice over the instruction's
/// group; on one rank (a group of one) the result is the operand. The NCCL
/// calls go on the communication stream; reductions finish there while the
/// step goes on, until their first reader (CommStream.h).
absl::Status collective(const Operands &ops, size_t index) {
  cudaStream_t stream = ops.step.stream;
  const Buffer &in = ops.in(0), &out = ops.out(0);
  void *x = ops.step.pointers[ops.operand(0)];
  void *y = ops.step.pointers[ops.result(0)];
  NcclGroup *group = ops.step.ncclGroup(ops.intAttr(0));
  CommStream *comm = ops.step.comm;
  if (!group || !comm || group->size() == 1) {
    if (x != y)
      MOE_CUDA_OK(cudaMemcpyAsync(y, x, out.sizeInBytes(),
                                  cudaMemcpyDeviceToDevice, stream));
    return absl::OkStatus();
  }
  if (in.numElements() == 0 || out.numElements() == 0)
    return absl::OkStatus();
  if (ops.instruction.opcode == Opcode::AllReduce) {
    // In place on the result, whose memory is the collective's from here on.
    if (x != y)
      MOE_CUDA_OK(cudaMemcpyAsync(y, x, out.sizeInBytes(),
                                  cudaMemcpyDeviceToDevice, stream));
    return comm->run(stream, comm->neededBy(index, true),
                     [&](cudaStream_t on) {
                       return group->allReduceSum(static_cast<float *>(y),
                                                  out.numElements(), on);
                     });
  }
  int64_t parts = group->size();
  bool gather = ops.instruction.opcode == Opcode::AllGather;
  // The block of one rank: a gather's operand, a scatter's or slice's result.
  Blocks blocks = blocksAround(gather ? in.shape : out.shape, ops.intAttr(1));
  int64_t block = blocks.outer * blocks.chunk;
  switch (ops.instruction.opcode) {
  case Opcode::AllGather: {
    int64_t bytes = block * 4;
    if (blocks.outer == 1)
      return comm->runNow(stream, [&](cudaStream_t on) {
        return group->allGatherBytes(x, y, bytes, on);
      });
    MOE_DEVICE_BUFFER(float, pack, parts * block, stream);
    MOE_CUDA_TRY(comm->runNow(stream, [&](cudaStream_t on) {
      return group->allGatherBytes(x, pack.get(), bytes, on);
    }));
    return interleaveBlocks(pack.get(), y, blocks.outer, parts, blocks.chunk,
                            /*pack=*/false, stream);
  }
  case Opcode::ReduceScatter: {
    // A private copy of the input (packed around the dimension), which the
    // arena may reuse before the communication stream reads it; freed there.
    MOE_DEVICE_BUFFER(float, copy, parts * block, stream);
    if (blocks.outer == 1)
      MOE_CUDA_OK(cudaMemcpyAsync(copy.get(), x, parts * block * 4,
                                  cudaMemcpyDeviceToDevice, stream));
    else
      MOE_CUDA_TRY(interleaveBlocks(x, copy.get(), blocks.outer, parts,
                                    blocks.chunk, /*pack=*/true, stream));
    float *input = copy.release();
    return comm->run(stream, comm->neededBy(index, true),
                     [&](cudaStream_t on) {
                       absl::Status status = group->reduceScatterSum(
                           input, static_cast<float *>(y), block, on);
                       MOE_CUDA_OK(cudaFreeAsync(input, on));
                       return status;
                     });
  }
  case Opcode::Slice: {
    // This rank's block: chunk `rank` of every outer row, no communication.
    size_t chunkBytes = static_cast<size_t>(blocks.chunk) * 4;
    MOE_CUDA_OK(cudaMemcpy2DAsync(
        y, chunkBytes,
        static_cast<const char *>(x) + group->rank() * chunkBytes,
        parts * chunkBytes, chunkBytes, blocks.outer,
        cudaMemcpyDeviceToDevice, stream));
    return absl::OkStatus();
  }
  default:
    return absl::InternalError("not a collective");
  }
}

/// Ends the step of an amax history: this step's amaxes (slot 0 of every
/// row) become their maximum over the ranks holding copies, then every row
/// moves on.
absl::Status fp8AmaxUpdate(const Operands &ops) {
  cudaStream_t stream = ops.step.stream;
  const Buffer &history = ops.in(0);
  int64_t length = history.shape[2], rows = history.numElements() / length;
  float *data = ops.inF(0);
  NcclGroup *group = ops.instruction.intAttrs.empty()
                         ? nullptr
                         : ops.step.ncclGroup(ops.intAttr(0));
  if (group && ops.step.comm && group->size() > 1) {
    MOE_DEVICE_BUFFER(float, current, rows, stream);
    size_t pitch = static_cast<size_t>(length) * sizeof(float);
    MOE_CUDA_OK(cudaMemcpy2DAsync(current.get(), sizeof(float), data, pitch,
                                  sizeof(float), rows,
                                  cudaMemcpyDeviceToDevice, stream));
    MOE_CUDA_TRY(ops.step.comm->runNow(stream, [&](cudaStream_t on) {
      return group->allReduceMax(current.get(), rows, on);
    }));
    MOE_CUDA_OK(cudaMemcpy2DAsync(data, pitch, current.get(), sizeof(float),
                                  sizeof(float), rows,
                                  cudaMemcpyDeviceToDevice, stream));
  }
  return rollAmaxHistories(data, rows, length, stream);
}

absl::Status runKernel(const DeviceStep &step, size_t index) {
  Operands ops(step, index);
  cudaStream_t stream = step.stream;
  switch (ops.instruction.opcode) {
  case Opcode::Embedding:
    return embedding(ops, index);
  case Opcode::EmbeddingGrad:
    return embeddingBackward(ops.inF(0), ops.inI(1), ops.outF(0),
                             ops.in(1).numElements(), ops.out(0).shape[0],
                             ops.out(0).shape[1], stream);
  case Opcode::RmsNorm:
    return rmsNormForward(ops.inF(0), ops.inF(1), ops.outF(0), rowsOf(ops.in(0)),
                          last(ops.in(0)), ops.floatAttr(0), stream);
  case Opcode::RmsNormGrad:
    return rmsNormBackward(ops.inF(0), ops.inF(1), ops.inF(2), ops.outF(0),
                           ops.outF(1), rowsOf(ops.in(0)), last(ops.in(0)),
                           ops.floatAttr(0), stream);
  case Opcode::Linear: {
    // y[T, N] = x[T, K] w[N, K]^T.
    int64_t T = rowsOf(ops.in(0)), K = last(ops.in(0)), N = ops.in(1).shape[0];
    GemmSpec spec;
    spec.transB = true;
    spec.m = T, spec.n = N, spec.k = K, spec.lda = K, spec.ldb = K, spec.ldc = N;
    return step.bf16Gemm(spec, ops.inF(0), T * K, ops.inF(1), N * K, 0.0f,
                         ops.outF(0));
  }
  case Opcode::LinearGradInput: {
    // dx[T, K] = dy[T, N] w[N, K].
    int64_t T = rowsOf(ops.in(0)), N = last(ops.in(0)), K = ops.in(1).shape[1];
    GemmSpec spec;
    spec.m = T, spec.n = K, spec.k = N, spec.lda = N, spec.ldb = K, spec.ldc = K;
    return step.bf16Gemm(spec, ops.inF(0), T * N, ops.inF(1), N * K, 0.0f,
                         ops.outF(0));
  }
  case Opcode::LinearGradWeight: {
    // dw[N, K] = dy[T, N]^T x[T, K].
    int64_t T = rowsOf(ops.in(0)), N = last(ops.in(0)), K = last(ops.in(1));
    GemmSpec spec;
    spec.transA = true;
    spec.m = N, spec.n = K, spec.k = T, spec.lda = N, spec.ldb = K, spec.ldc = K;
    return step.bf16Gemm(spec, ops.inF(0), T * N, ops.inF(1), T * K, 0.0f,
                         ops.outF(0));
  }
  case Opcode::Rope:
  case Opcode::RopeGrad: {
    const std::vector<int64_t> &shape = ops.in(0).shape;
    int64_t heads = ops.intAttr(0);
    auto kernel = ops.instruction.opcode == Opcode::Rope ? ropeForward
                                                         : ropeBackward;
    return kernel(ops.inF(0), ops.outF(0), shape[0], shape[1], heads,
                  shape[2] / heads, ops.floatAttr(0), stream);
  }
  case Opcode::Attention: {
    const std::vector<int64_t> &q = ops.in(0).shape;
    int64_t heads = ops.intAttr(0);
    return attentionForward(ops.inF(0), ops.inF(1), ops.inF(2), ops.outF(0),
                            ops.outF(1), q[0], q[1], heads, ops.intAttr(1),
                            q[2] / heads, stream);
  }
  case Opcode::AttentionGrad: {
    const std::vector<int64_t> &q = ops.in(1).shape;
    int64_t heads = ops.intAttr(0);
    MOE_DEVICE_BUFFER(float, workspace,
                      attentionBackwardWorkspaceBytes(q[0], q[1], heads) /
                          sizeof(float),
                      stream);
    return attentionBackward(ops.inF(0), ops.inF(1), ops.inF(2), ops.inF(3),
                             ops.inF(4), ops.inF(5), ops.outF(0), ops.outF(1),
                             ops.outF(2), q[0], q[1], heads, ops.intAttr(1),
                             q[2] / heads, workspace.get(), stream);
  }
  case Opcode::Router:
    return routerForward(ops.inF(0), ops.outF(0), ops.outF(1), ops.outI(2),
                         rowsOf(ops.in(0)), last(ops.in(0)), ops.intAttr(0),
                         ops.floatAttr(0), stream);
  case Opcode::RouterGrad: {
    const float *dprobs =
        ops.instruction.operands.size() == 3 ? ops.inF(2) : nullptr;
    return routerBackward(ops.inF(0), dprobs, ops.inF(1), ops.outF(0),
                          rowsOf(ops.in(1)), last(ops.in(1)), ops.intAttr(0),
                          stream);
  }
  case Opcode::Experts:
    return runExpertsForward(step, index);
  case Opcode::ExpertsGrad:
    return runExpertsBackward(step, index);
  case Opcode::Swiglu:
    return swigluForward(ops.inF(0), ops.inF(1), ops.outF(0),
                         ops.in(0).numElements(), stream);
  case Opcode::SwigluGrad:
    return swigluBackward(ops.inF(0), ops.inF(1), ops.inF(2), ops.outF(0),
                          ops.outF(1), ops.in(0).numElements(), stream);
  case Opcode::Add:
    return add(ops.inF(0), ops.inF(1), ops.outF(0), ops.in(0).numElements(),
               stream);
  case Opcode::CrossEntropy:
    return crossEntropy(ops, index);
  case Opcode::CrossEntropyGrad:
    return crossEntropyGrad(ops, index);
  case Opcode::AuxLoss:
  case Opcode::AuxLossGrad:
    return auxLoss(ops, ops.instruction.opcode == Opcode::AuxLoss);
  case Opcode::WeightedSum: {
    size_t n = ops.instruction.operands.size();
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) {
      absl::StatusOr<float> value = step.readScalar(ops.operand(i));
      if (!value.ok())
        return value.status();
      values[i] = *value;
    }
    return step.writeScalar(
        ops.result(0), semantics::weightedSum(ops.instruction.floatAttrs.data(),
                                              values.data(), n));
  }
  case Opcode::Constant:
    return fill(ops.outF(0), ops.floatAttr(0), ops.out(0).numElements(),
                stream);
  case Opcode::GlobalNorm:
    return globalNorm(ops);
  case Opcode::ClipCoefficient: {
    absl::StatusOr<float> norm = step.readScalar(ops.operand(0));
    if (!norm.ok())
      return norm.status();
    return step.writeScalar(ops.result(0),
                            semantics::clipCoefficient(ops.floatAttr(0), *norm));
  }
  case Opcode::LearningRate: {
    int32_t at = 0;
    MOE_CUDA_TRY(step.read(ops.inI(0), 1, &at));
    return step.writeScalar(
        ops.result(0), cpu::learningRate(at, ops.floatAttr(0), ops.floatAttr(1),
                                         ops.intAttr(0), ops.intAttr(1)));
  }
  case Opcode::AdamW:
    return adamwUpdate(ops);
  case Opcode::AllReduce:
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
  case Opcode::Slice:
    return collective(ops, index);
  case Opcode::Fp8AmaxUpdate:
    return fp8AmaxUpdate(ops);
  }
  return absl::UnimplementedError(
      absl::StrCat(describeInstruction(step.program, index),
                   ": unknown opcode"));
}

} // namespace

absl::Status runDeviceInstruction(const DeviceStep &step, size_t index) {
  absl::Status status = runKernel(step, index);
  // Data errors name the instruction already ("instruction 3 (...) ...").
  if (status.ok() || absl::StartsWith(status.message(), "instruction "))
    return status;
  return absl::Status(status.code(),
                      absl::StrCat(describeInstruction(step.program, index), ": ",
                                   status.message()));
}

} // namespace moe::rt::cuda
