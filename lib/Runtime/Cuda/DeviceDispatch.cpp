//===- DeviceDispatch.cpp - run one instruction with the CUDA kernels -----===//
//
// One run() per opcode, called by the dispatcher generated from the op
// table, as lib/Runtime/Engine/Dispatch.cpp for the CPU; the verifier
// guarantees the shapes read here. A one-rank program's groups are
// groups of one, so collectives are copies and sums over ranks are the
// rank's own.
//
// Mixed precision (docs/precision.md): buffers keep their artifact dtype
// on the device, BF16 ones two bytes an element. The GEMMs read BF16
// operands as they are (cuBLASLt, fp32 accumulation), Cast and AdamW's
// working copy have their own kernels, and the collectives move BF16 as
// BF16 (ncclBfloat16). The other kernels compute in fp32: an instruction
// with BF16 operands or results runs them on per-instruction fp32 scratch,
// each BF16 operand widened exactly into it and each BF16 result rounded
// once, to nearest even, out of it (runWidened), as the CPU's kernels
// decode and round. The scratch lives for one instruction; nothing BF16 is
// kept in fp32. The exceptions are the instructions with kernels for BF16
// storage (DeviceBf16.cpp: attention on the tensor cores, norms, RoPE,
// element-wise ops, cross-entropy, the embedding), which read and write
// their BF16 buffers as they are.
//
//===----------------------------------------------------------------------===//
#include "DeviceStep.h"

#include "DeviceBuffer.h"

#include "moe/Runtime/Artifact/OpViews.h"
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

int64_t last(const Buffer &buffer) { return buffer.shape.back(); }

/// The targets of a loss, read back: ids >= V are a data error (as on the
/// CPU); the count of those in [0, V) divides the mean.
absl::StatusOr<int64_t> readTargetCount(const DeviceStep &step, size_t index,
                                        uint32_t operand, int64_t vocab) {
  absl::StatusOr<std::vector<int32_t>> targets = step.readIds(operand);
  if (!targets.ok())
    return targets.status();
  return engine::checkTargets(step.program, index, step.buffer(operand),
                              targets->data(), vocab);
}

/// The MPI group a loss's tokens are split over, or null when they are all
/// on this rank.
comm::Group *tokenGroup(const DeviceStep &step, std::optional<int64_t> group) {
  return group ? step.mpiGroup(*group) : nullptr;
}

/// `bf16`: the instruction runs on BF16 storage (runsOnBf16Storage).
absl::Status embedding(const DeviceStep &step, size_t index,
                       const ops::EmbeddingView &op, bool bf16) {
  const Buffer &table = step.buffer(op.table());
  int64_t vocab = table.shape[0], hidden = table.shape[1];
  int64_t T = step.buffer(op.tokens()).numElements();
  MOE_DEVICE_BUFFER(int64_t, firstBad, 1, step.stream);
  if (bf16)
    MOE_CUDA_TRY(embeddingForward(step.i32(op.tokens()), step.bf16(op.table()),
                                  step.bf16(op.y()), T, vocab, hidden,
                                  firstBad.get(), step.stream));
  else
    MOE_CUDA_TRY(embeddingForward(step.i32(op.tokens()), step.f32(op.table()),
                                  step.f32(op.y()), T, vocab, hidden,
                                  firstBad.get(), step.stream));
  if (step.check)
    return recordBadId(firstBad.get(), step.i32(op.tokens()),
                       StepCheck::BadToken, static_cast<uint32_t>(index),
                       op.tokens(), vocab, step.check, step.stream);
  int64_t bad = -1;
  MOE_CUDA_TRY(step.read(firstBad.get(), 1, &bad));
  if (bad < 0)
    return absl::OkStatus();
  int32_t id = 0;
  MOE_CUDA_TRY(step.read(step.i32(op.tokens()) + bad, 1, &id));
  return absl::InvalidArgumentError(
      absl::StrCat(describeInstruction(step.program, index), ": token id ", id,
                   " at ", describeIdPosition(step.buffer(op.tokens()), bad),
                   " is outside the embedding table [0, ", vocab, ")"));
}

/// Where a loss's sums over its token group are taken on the device: they
/// can be when the step checks on the device and the group, if it has
/// several ranks, has its NCCL communicator; `nccl` is null when this
/// rank's tokens are all of them.
struct DeviceSums {
  bool possible = false;
  NcclGroup *nccl = nullptr;
  /// The ranks whose tokens the loss covers.
  int64_t ranks = 1;

  /// values = their sum over the group in rank order (comm::sumOverGroup's
  /// order), on the communication stream; nothing on one rank.
  template <typename T>
  absl::Status sum(const DeviceStep &step, T *values, int64_t n) const {
    if (!nccl)
      return absl::OkStatus();
    NcclGroup *group = nccl;
    return step.comm->runNow(step.stream, [&](cudaStream_t on) {
      return group->sumInRankOrder(values, n, on);
    });
  }
};

DeviceSums deviceSumsOf(const DeviceStep &step,
                        std::optional<int64_t> groupIndex) {
  DeviceSums sums;
  if (!step.check)
    return sums;
  if (!tokenGroup(step, groupIndex)) {
    sums.possible = true;
    return sums;
  }
  NcclGroup *nccl = step.ncclGroup(*groupIndex);
  if (!nccl || !step.comm)
    return sums;
  sums.possible = true;
  sums.ranks = nccl->size();
  sums.nccl = nccl->size() > 1 ? nccl : nullptr;
  return sums;
}

/// The counted targets of a loss on the device (*count), a target >= V
/// recorded in the step's check: nothing waits for the stream.
absl::Status countTargetsOnDevice(const DeviceStep &step, size_t index,
                                  uint32_t targets, int64_t vocab,
                                  unsigned long long *count) {
  MOE_DEVICE_BUFFER(int64_t, firstBad, 1, step.stream);
  int64_t T = step.buffer(targets).numElements();
  MOE_CUDA_TRY(countTargets(step.i32(targets), T, vocab, count, firstBad.get(),
                            step.stream));
  return recordBadId(firstBad.get(), step.i32(targets), StepCheck::BadTarget,
                     static_cast<uint32_t>(index), targets, vocab, step.check,
                     step.stream);
}

template <typename S>
absl::Status crossEntropySumsOf(const DeviceStep &step,
                                const ops::CrossEntropyView &op,
                                const S *logits, int64_t T, int64_t vocab,
                                double *sum, unsigned long long *counted) {
  MOE_CUDA_OK(cudaMemsetAsync(sum, 0, sizeof(double), step.stream));
  MOE_CUDA_OK(
      cudaMemsetAsync(counted, 0, sizeof(unsigned long long), step.stream));
  return crossEntropySums(logits, step.i32(op.targets()), T, vocab, sum,
                          counted, step.stream);
}

absl::Status crossEntropy(const DeviceStep &step, size_t index,
                          const ops::CrossEntropyView &op, bool bf16) {
  const Buffer &logits = step.buffer(op.logits());
  int64_t vocab = last(logits), T = rowsOf(logits);
  comm::Group *group = tokenGroup(step, op.group());
  MOE_DEVICE_BUFFER(double, sum, 1, step.stream);
  MOE_DEVICE_BUFFER(unsigned long long, counted, 1, step.stream);
  auto sums = [&] {
    return bf16 ? crossEntropySumsOf(step, op, step.bf16(op.logits()), T, vocab,
                                     sum.get(), counted.get())
                : crossEntropySumsOf(step, op, step.f32(op.logits()), T, vocab,
                                     sum.get(), counted.get());
  };
  if (DeviceSums over = deviceSumsOf(step, op.group()); over.possible) {
    // The mean on the device, over every rank's tokens: the loss is read
    // once, when the step ends.
    MOE_DEVICE_BUFFER(unsigned long long, count, 1, step.stream);
    MOE_CUDA_TRY(
        countTargetsOnDevice(step, index, op.targets(), vocab, count.get()));
    MOE_CUDA_TRY(sums());
    MOE_CUDA_TRY(over.sum(step, sum.get(), 1));
    MOE_CUDA_TRY(over.sum(step, counted.get(), 1));
    return crossEntropyMean(sum.get(), counted.get(), step.f32(op.loss()),
                            step.stream);
  }
  absl::StatusOr<int64_t> count =
      readTargetCount(step, index, op.targets(), vocab);
  if (!count.ok())
    return count.status();
  MOE_CUDA_TRY(sums());
  cpu::CrossEntropySums host;
  MOE_CUDA_TRY(step.read(sum.get(), 1, &host.sum));
  host.count = *count;
  // The mean over every rank's tokens: sums and counts add up first.
  if (group)
    MOE_CUDA_TRY(comm::sumOverGroup(*group, absl::MakeSpan(&host.sum, 1),
                                    absl::MakeSpan(&host.count, 1)));
  return step.writeScalar(op.loss(), cpu::crossEntropyMean(host));
}

absl::Status crossEntropyGrad(const DeviceStep &step, size_t index,
                              const ops::CrossEntropyGradView &op, bool bf16) {
  const Buffer &logits = step.buffer(op.logits());
  int64_t vocab = last(logits), T = rowsOf(logits);
  comm::Group *group = tokenGroup(step, op.group());
  if (DeviceSums over = deviceSumsOf(step, op.group()); over.possible) {
    MOE_DEVICE_BUFFER(unsigned long long, count, 1, step.stream);
    MOE_CUDA_TRY(
        countTargetsOnDevice(step, index, op.targets(), vocab, count.get()));
    // The mean's divisor counts every rank's targets.
    MOE_CUDA_TRY(over.sum(step, count.get(), 1));
    const float *dloss = step.f32(op.dloss());
    if (bf16)
      return crossEntropyBackward(
          dloss, count.get(), step.bf16(op.logits()), step.i32(op.targets()),
          step.bf16(op.dlogits()), T, vocab, step.stream);
    return crossEntropyBackward(dloss, count.get(), step.f32(op.logits()),
                                step.i32(op.targets()), step.f32(op.dlogits()),
                                T, vocab, step.stream);
  }
  absl::StatusOr<int64_t> count =
      readTargetCount(step, index, op.targets(), vocab);
  if (!count.ok())
    return count.status();
  int64_t total = *count;
  if (group)
    MOE_CUDA_TRY(comm::sumOverGroup(*group, {}, absl::MakeSpan(&total, 1)));
  absl::StatusOr<float> dloss = step.readScalar(op.dloss());
  if (!dloss.ok())
    return dloss.status();
  if (bf16)
    return crossEntropyBackward(*dloss, step.bf16(op.logits()),
                                step.i32(op.targets()), step.bf16(op.dlogits()),
                                T, vocab, total, step.stream);
  return crossEntropyBackward(*dloss, step.f32(op.logits()),
                              step.i32(op.targets()), step.f32(op.dlogits()), T,
                              vocab, total, step.stream);
}

/// AuxLoss (no dloss: the loss into `out`) and AuxLossGrad (dprobs into
/// `out`).
absl::Status auxLoss(const DeviceStep &step, uint32_t probsBuffer, int64_t topK,
                     std::optional<int64_t> groupIndex,
                     std::optional<uint32_t> dlossBuffer, uint32_t out) {
  bool forward = !dlossBuffer;
  const Buffer &probs = step.buffer(probsBuffer);
  const float *p = step.f32(probsBuffer);
  int64_t T = rowsOf(probs), E = last(probs);
  cudaStream_t stream = step.stream;
  MOE_DEVICE_BUFFER(unsigned long long, count, E, stream);
  MOE_DEVICE_BUFFER(double, probSum, E, stream);
  MOE_CUDA_TRY(
      auxLossStatistics(p, T, E, topK, count.get(), probSum.get(), stream));
  comm::Group *group = tokenGroup(step, groupIndex);
  if (DeviceSums over = deviceSumsOf(step, groupIndex); over.possible) {
    // Loads and probability sums over every rank's tokens, on the device.
    // Every rank of the group holds T tokens (one program, one shape).
    MOE_CUDA_TRY(over.sum(step, count.get(), E));
    int64_t tokens = T * over.ranks;
    if (forward) {
      MOE_CUDA_TRY(over.sum(step, probSum.get(), E));
      return auxLossFromStatistics(count.get(), probSum.get(), E, tokens,
                                   step.f32(out), stream);
    }
    return auxLossBackward(step.f32(*dlossBuffer), count.get(), tokens,
                           step.f32(out), T, E, stream);
  }
  cpu::AuxLossStatistics stats;
  std::vector<unsigned long long> counts(E);
  stats.probSum.resize(E);
  MOE_CUDA_TRY(step.read(count.get(), E, counts.data()));
  MOE_CUDA_TRY(step.read(probSum.get(), E, stats.probSum.data()));
  stats.count.assign(counts.begin(), counts.end());
  stats.tokens = T;
  // Expert loads, probability sums and token counts over every rank's
  // tokens (the token count rides after the loads), as on the CPU.
  if (group) {
    stats.count.push_back(stats.tokens);
    MOE_CUDA_TRY(comm::sumOverGroup(*group, absl::MakeSpan(stats.probSum),
                                    absl::MakeSpan(stats.count)));
    stats.tokens = stats.count.back();
    stats.count.pop_back();
  }
  if (forward)
    return step.writeScalar(out, cpu::auxLossFromStatistics(stats));
  absl::StatusOr<float> dloss = step.readScalar(*dlossBuffer);
  if (!dloss.ok())
    return dloss.status();
  if (group) {
    counts.assign(stats.count.begin(), stats.count.end());
    MOE_CUDA_OK(cudaMemcpyAsync(count.get(), counts.data(),
                                E * sizeof(unsigned long long),
                                cudaMemcpyHostToDevice, stream));
    MOE_CUDA_OK(cudaStreamSynchronize(stream));
  }
  return auxLossBackward(*dloss, count.get(), stats.tokens, step.f32(out), T, E,
                         stream);
}

/// squares[i] = its sum over operand i's group (none for a negative id),
/// on the device: one gather, sum in rank order and scatter per group, in
/// order of first use, as comm::sumEachOverItsGroup does on the host.
absl::Status sumSquaresOverGroups(const DeviceStep &step,
                                  const ops::GlobalNormView &op,
                                  double *squares) {
  const std::vector<int64_t> &groupOf = op.groups();
  std::vector<int64_t> order;
  for (int64_t g : groupOf)
    if (g >= 0 && std::find(order.begin(), order.end(), g) == order.end())
      order.push_back(g);
  cudaStream_t stream = step.stream;
  for (int64_t g : order) {
    NcclGroup *nccl = step.ncclGroup(g);
    if (!nccl || nccl->size() == 1)
      continue;
    std::vector<int64_t> members;
    for (size_t i = 0; i < groupOf.size(); ++i)
      if (groupOf[i] == g)
        members.push_back(static_cast<int64_t>(i));
    int64_t n = static_cast<int64_t>(members.size());
    MOE_DEVICE_BUFFER(int64_t, at, n, stream);
    MOE_DEVICE_BUFFER(double, packed, n, stream);
    // From pageable memory: returns once `members` is staged.
    MOE_CUDA_OK(cudaMemcpyAsync(at.get(), members.data(), n * sizeof(int64_t),
                                cudaMemcpyHostToDevice, stream));
    MOE_CUDA_TRY(gatherDoubles(squares, at.get(), n, packed.get(), stream));
    MOE_CUDA_TRY(step.comm->runNow(stream, [&](cudaStream_t on) {
      return nccl->sumInRankOrder(packed.get(), n, on);
    }));
    MOE_CUDA_TRY(scatterDoubles(packed.get(), at.get(), n, squares, stream));
  }
  return absl::OkStatus();
}

absl::Status globalNorm(const DeviceStep &step, const ops::GlobalNormView &op) {
  const std::vector<uint32_t> &grads = op.grads();
  size_t n = grads.size();
  MOE_DEVICE_BUFFER(double, squares, n, step.stream);
  MOE_CUDA_OK(
      cudaMemsetAsync(squares.get(), 0, n * sizeof(double), step.stream));
  for (size_t i = 0; i < n; ++i) {
    // Another pipeline stage's gradient: that stage adds its square.
    if (step.foreignGradients && (*step.foreignGradients)[grads[i]])
      continue;
    MOE_CUDA_TRY(sumOfSquares(step.f32(grads[i]),
                              step.buffer(grads[i]).numElements(),
                              squares.get() + i, step.stream));
  }
  // Every gradient held here, no pipeline stages: the norm on the device,
  // each square summed over its group as on the host.
  if (step.check && !step.stageGroup && !step.foreignGradients &&
      (!step.groups || step.comm)) {
    MOE_CUDA_TRY(sumSquaresOverGroups(step, op, squares.get()));
    return normFromSquares(squares.get(), static_cast<int64_t>(n),
                           step.f32(op.norm()), step.stream);
  }
  std::vector<double> host(n);
  MOE_CUDA_TRY(step.read(squares.get(), static_cast<int64_t>(n), host.data()));
  // Over the groups and the pipeline stages, as on the CPU; one rank has
  // groups of one.
  std::function<comm::Group &(int64_t)> groupOf;
  if (step.groups)
    groupOf = [&](int64_t g) -> comm::Group & { return *step.mpiGroup(g); };
  absl::StatusOr<float> norm = engine::globalNormFromSquares(
      absl::MakeSpan(host), op.groups(), groupOf, step.stageGroup);
  if (!norm.ok())
    return norm.status();
  return step.writeScalar(op.norm(), *norm);
}

absl::Status adamwUpdate(const DeviceStep &step, size_t index,
                         const ops::AdamWView &op) {
  int64_t batch = step.adamwBatchOf ? (*step.adamwBatchOf)[index] : -1;
  // A later member of a batch: its update ran with the batch's first.
  if (batch >= 0 && static_cast<size_t>(batch) != index)
    return absl::OkStatus();
  absl::StatusOr<float> lr = step.readScalar(op.lr());
  if (!lr.ok())
    return lr.status();
  absl::StatusOr<int32_t> at = step.readStep(op.step());
  if (!at.ok())
    return at.status();
  if (batch >= 0) {
    std::vector<AdamwTensor> tensors;
    for (size_t member = index; member < step.adamwBatchOf->size() &&
                                (*step.adamwBatchOf)[member] == batch;
         ++member) {
      ops::AdamWView each(step.program.instructions[member]);
      // A later member's gradient may still be summed on the communication
      // stream (its first reader): the batch waits for it now.
      if (step.comm && member != index)
        MOE_CUDA_TRY(step.comm->before(step.stream, member));
      std::optional<uint32_t> working = each.working();
      tensors.push_back({step.f32(each.param()), step.f32(each.grad()),
                         step.f32(each.expAvg()), step.f32(each.expAvgSq()),
                         working ? step.bf16(*working) : nullptr,
                         step.buffer(each.param()).numElements(),
                         each.weightDecay()});
    }
    return adamwMany(tensors.data(), static_cast<int64_t>(tensors.size()),
                     step.f32(op.gradScale()), *lr, op.beta1(), op.beta2(),
                     op.eps(), *at, step.stream, step.check);
  }
  // Mixed precision: the BF16 working copy takes the updated master.
  std::optional<uint32_t> working = op.working();
  return adamw(step.f32(op.param()), step.f32(op.grad()),
               step.f32(op.gradScale()), step.f32(op.expAvg()),
               step.f32(op.expAvgSq()), step.buffer(op.param()).numElements(),
               *lr, op.beta1(), op.beta2(), op.eps(), op.weightDecay(), *at,
               step.stream, working ? step.bf16(*working) : nullptr,
               step.check);
}

/// A tensor's blocks around dimension `dim` of one rank's block `shape`:
/// [outer, parts, chunk] (StepSemantics.h's layout, as on the CPU).
using Blocks = semantics::CollectiveBlocks;
Blocks blocksAround(const std::vector<int64_t> &shape, int64_t dim) {
  return semantics::blocksAround(shape.data(),
                                 static_cast<int64_t>(shape.size()), dim);
}

/// Where a reduction runs: a gradient reduction read later than the next
/// instruction on the reductions lane over the group's second communicator
/// (CommStream::groupsReducedLater gave the group one), anything else on
/// the main lane.
struct ReductionLane {
  CommStream::Lane lane;
  NcclGroup &group;
};
ReductionLane reductionLaneOf(const DeviceStep &step, size_t index,
                              NcclGroup &group) {
  if (step.comm->neededBy(index, true) > index + 1)
    return {CommStream::Lane::Reductions, group.forReductions()};
  return {CommStream::Lane::Main, group};
}

/// AllReduce, AllGather, ReduceScatter and Slice over the instruction's
/// group; on one rank (a group of one) the result is the operand. The NCCL
/// calls go on the communication stream; reductions finish there while the
/// step goes on, until their first reader (CommStream.h).
enum class CollectiveKind { AllReduce, AllGather, ReduceScatter, Slice };

absl::Status collective(const DeviceStep &step, size_t index,
                        CollectiveKind kind, uint32_t xBuffer, uint32_t yBuffer,
                        int64_t groupIndex, int64_t dim) {
  cudaStream_t stream = step.stream;
  const Buffer &in = step.buffer(xBuffer), &out = step.buffer(yBuffer);
  void *x = step.pointers[xBuffer];
  void *y = step.pointers[yBuffer];
  NcclGroup *group = step.ncclGroup(groupIndex);
  CommStream *comm = step.comm;
  if (!group || !comm || group->size() == 1) {
    if (x != y)
      MOE_CUDA_OK(cudaMemcpyAsync(y, x, out.sizeInBytes(),
                                  cudaMemcpyDeviceToDevice, stream));
    return absl::OkStatus();
  }
  if (in.numElements() == 0 || out.numElements() == 0)
    return absl::OkStatus();
  // A collective moves its operand's dtype (the result's, SameDType).
  bool bf16 = in.dtype == DType::BF16;
  int64_t elementBytes = static_cast<int64_t>(dtypeBytes(in.dtype));
  ReductionLane reduction = reductionLaneOf(step, index, *group);
  if (kind == CollectiveKind::AllReduce) {
    // In place on the result, whose memory is the collective's from here on.
    if (x != y)
      MOE_CUDA_OK(cudaMemcpyAsync(y, x, out.sizeInBytes(),
                                  cudaMemcpyDeviceToDevice, stream));
    return comm->run(
        stream, comm->neededBy(index, true),
        [&](cudaStream_t on) {
          if (bf16)
            return reduction.group.allReduceSum(static_cast<uint16_t *>(y),
                                                out.numElements(), on);
          return reduction.group.allReduceSum(static_cast<float *>(y),
                                              out.numElements(), on);
        },
        reduction.lane);
  }
  int64_t parts = group->size();
  bool gather = kind == CollectiveKind::AllGather;
  // The block of one rank: a gather's operand, a scatter's or slice's result.
  Blocks blocks = blocksAround(gather ? in.shape : out.shape, dim);
  int64_t block = blocks.outer * blocks.chunk;
  switch (kind) {
  case CollectiveKind::AllGather: {
    int64_t bytes = block * elementBytes;
    // A parameter's gather (FSDP) reads a buffer nothing writes before the
    // optimizer and writes its result in place: it runs until its first
    // reader, one layer ahead where moe-schedule-collectives put it so.
    bool persistent =
        in.kind == BufferKind::Parameter || in.kind == BufferKind::WorkingCopy;
    if (blocks.outer == 1 && persistent)
      return comm->run(stream, comm->neededBy(index, true),
                       [&](cudaStream_t on) {
                         return group->allGatherBytes(x, y, bytes, on);
                       });
    if (blocks.outer == 1)
      return comm->runNow(stream, [&](cudaStream_t on) {
        return group->allGatherBytes(x, y, bytes, on);
      });
    MOE_DEVICE_BUFFER(uint8_t, pack, parts * bytes, stream);
    MOE_CUDA_TRY(comm->runNow(stream, [&](cudaStream_t on) {
      return group->allGatherBytes(x, pack.get(), bytes, on);
    }));
    return interleaveBlocks(pack.get(), y, blocks.outer, parts, blocks.chunk,
                            /*pack=*/false, stream,
                            static_cast<int>(elementBytes));
  }
  case CollectiveKind::ReduceScatter: {
    // A private copy of the input (packed around the dimension), which the
    // arena may reuse before the communication stream reads it; freed there.
    MOE_DEVICE_BUFFER(uint8_t, copy, parts * block * elementBytes, stream);
    if (blocks.outer == 1)
      MOE_CUDA_OK(cudaMemcpyAsync(copy.get(), x, parts * block * elementBytes,
                                  cudaMemcpyDeviceToDevice, stream));
    else
      MOE_CUDA_TRY(interleaveBlocks(x, copy.get(), blocks.outer, parts,
                                    blocks.chunk, /*pack=*/true, stream,
                                    static_cast<int>(elementBytes)));
    uint8_t *input = copy.release();
    return comm->run(
        stream, comm->neededBy(index, true),
        [&](cudaStream_t on) {
          absl::Status status =
              bf16 ? reduction.group.reduceScatterSum(
                         reinterpret_cast<const uint16_t *>(input),
                         static_cast<uint16_t *>(y), block, on)
                   : reduction.group.reduceScatterSum(
                         reinterpret_cast<const float *>(input),
                         static_cast<float *>(y), block, on);
          MOE_CUDA_OK(cudaFreeAsync(input, on));
          return status;
        },
        reduction.lane);
  }
  case CollectiveKind::Slice: {
    // This rank's block: chunk `rank` of every outer row, no communication.
    size_t chunkBytes = static_cast<size_t>(blocks.chunk * elementBytes);
    MOE_CUDA_OK(cudaMemcpy2DAsync(y, chunkBytes,
                                  static_cast<const char *>(x) +
                                      group->rank() * chunkBytes,
                                  parts * chunkBytes, chunkBytes, blocks.outer,
                                  cudaMemcpyDeviceToDevice, stream));
    return absl::OkStatus();
  }
  case CollectiveKind::AllReduce:
    break;
  }
  return absl::InternalError("not a collective");
}

/// ReduceBucket: the operands packed into one device buffer on the compute
/// stream (slot r of a reduce-scatter's packing holds block r of every
/// operand in operand order), one NCCL call on the communication stream,
/// the results unpacked there: the bucket finishes while the step goes on,
/// until its first reader, as a single reduction does. The packing is
/// private (the arena may reuse the operands after this position) and
/// freed on the communication stream.
absl::Status reduceBucket(const DeviceStep &step, size_t index,
                          const ops::ReduceBucketView &op) {
  cudaStream_t stream = step.stream;
  const std::vector<uint32_t> &xs = op.xs(), &ys = op.ys();
  NcclGroup *group = step.ncclGroup(op.group());
  CommStream *comm = step.comm;
  if (!group || !comm || group->size() == 1) {
    for (size_t i = 0; i < xs.size(); ++i)
      if (step.pointers[xs[i]] != step.pointers[ys[i]])
        MOE_CUDA_OK(cudaMemcpyAsync(step.pointers[ys[i]], step.pointers[xs[i]],
                                    step.buffer(ys[i]).sizeInBytes(),
                                    cudaMemcpyDeviceToDevice, stream));
    return absl::OkStatus();
  }
  int64_t total = 0;
  for (uint32_t x : xs)
    total += step.buffer(x).numElements();
  if (total == 0)
    return absl::OkStatus();
  // One dtype for the bucket (checkReduceBucket).
  bool bf16 = step.buffer(xs[0]).dtype == DType::BF16;
  size_t elementBytes = dtypeBytes(step.buffer(xs[0]).dtype);
  bool scatter = op.scatter();
  int64_t parts = group->size(), slot = total / parts;
  MOE_DEVICE_BUFFER(uint8_t, pack,
                    (total + (scatter ? slot : 0)) * elementBytes, stream);
  size_t offset = 0; // bytes into the packing (a slot of it, scattering)
  for (uint32_t x : xs) {
    size_t bytes = step.buffer(x).sizeInBytes();
    if (!scatter) {
      MOE_CUDA_OK(cudaMemcpyAsync(pack.get() + offset, step.pointers[x], bytes,
                                  cudaMemcpyDeviceToDevice, stream));
      offset += bytes;
      continue;
    }
    size_t block = bytes / static_cast<size_t>(parts);
    MOE_CUDA_OK(cudaMemcpy2DAsync(pack.get() + offset, slot * elementBytes,
                                  step.pointers[x], block, block, parts,
                                  cudaMemcpyDeviceToDevice, stream));
    offset += block;
  }
  uint8_t *packed = pack.release();
  uint8_t *mine = packed + total * elementBytes;
  ReductionLane reduction = reductionLaneOf(step, index, *group);
  NcclGroup &over = reduction.group;
  return comm->run(
      stream, comm->neededBy(index, true),
      [&](cudaStream_t on) {
        absl::Status status;
        if (!scatter)
          status = bf16 ? over.allReduceSum(
                              reinterpret_cast<uint16_t *>(packed), total, on)
                        : over.allReduceSum(reinterpret_cast<float *>(packed),
                                            total, on);
        else
          status = bf16 ? over.reduceScatterSum(
                              reinterpret_cast<const uint16_t *>(packed),
                              reinterpret_cast<uint16_t *>(mine), slot, on)
                        : over.reduceScatterSum(
                              reinterpret_cast<const float *>(packed),
                              reinterpret_cast<float *>(mine), slot, on);
        const uint8_t *from = scatter ? mine : packed;
        for (uint32_t y : ys) {
          size_t bytes = step.buffer(y).sizeInBytes();
          if (status.ok())
            status = cudaStatus(cudaMemcpyAsync(step.pointers[y], from, bytes,
                                                cudaMemcpyDeviceToDevice, on),
                                "cudaMemcpyAsync");
          from += bytes;
        }
        MOE_CUDA_OK(cudaFreeAsync(packed, on));
        return status;
      },
      reduction.lane);
}

/// Ends the step of an amax history: this step's amaxes (slot 0 of every
/// row) become their maximum over the ranks holding copies, then every row
/// moves on.
absl::Status fp8AmaxUpdate(const DeviceStep &step,
                           const ops::Fp8AmaxUpdateView &op) {
  cudaStream_t stream = step.stream;
  const Buffer &history = step.buffer(op.history());
  int64_t length = history.shape[2], rows = history.numElements() / length;
  float *data = step.f32(op.history());
  NcclGroup *group = op.group() ? step.ncclGroup(*op.group()) : nullptr;
  if (group && step.comm && group->size() > 1) {
    MOE_DEVICE_BUFFER(float, current, rows, stream);
    size_t pitch = static_cast<size_t>(length) * sizeof(float);
    MOE_CUDA_OK(cudaMemcpy2DAsync(current.get(), sizeof(float), data, pitch,
                                  sizeof(float), rows, cudaMemcpyDeviceToDevice,
                                  stream));
    MOE_CUDA_TRY(step.comm->runNow(stream, [&](cudaStream_t on) {
      return group->allReduceMax(current.get(), rows, on);
    }));
    MOE_CUDA_OK(cudaMemcpy2DAsync(data, pitch, current.get(), sizeof(float),
                                  sizeof(float), rows, cudaMemcpyDeviceToDevice,
                                  stream));
  }
  return rollAmaxHistories(data, rows, length, stream, step.check);
}

/// The CUDA backend of ops::dispatch: one run() per opcode.
class DeviceKernels {
public:
  /// `bf16`: the instruction runs on BF16 storage (runsOnBf16Storage).
  DeviceKernels(const DeviceStep &step, size_t index, bool bf16)
      : step(step), index(index), stream(step.stream), bf16(bf16) {}

  absl::Status run(const ops::EmbeddingView &op) {
    return embedding(step, index, op, bf16);
  }
  absl::Status run(const ops::EmbeddingGradView &op) {
    const Buffer &dtable = in(op.dtable());
    int64_t T = in(op.tokens()).numElements();
    if (bf16)
      return embeddingBackward(bits(op.dy()), i32(op.tokens()),
                               f32(op.dtable()), T, dtable.shape[0],
                               dtable.shape[1], stream);
    return embeddingBackward(f32(op.dy()), i32(op.tokens()), f32(op.dtable()),
                             T, dtable.shape[0], dtable.shape[1], stream);
  }
  // RmsNorm over rows of H; HeadRmsNorm over each head's row of D.
  absl::Status run(const ops::RmsNormView &op) {
    return normRows(op.x(), op.w(), op.y(), rowsOf(in(op.x())),
                    last(in(op.x())), op.eps());
  }
  absl::Status run(const ops::HeadRmsNormView &op) {
    return normRows(op.x(), op.w(), op.y(), rowsOf(in(op.x())) * op.heads(),
                    last(in(op.w())), op.eps());
  }
  absl::Status run(const ops::RmsNormGradView &op) {
    return normRowsGrad(op.dy(), op.x(), op.w(), op.dx(), op.dw(),
                        rowsOf(in(op.dy())), last(in(op.dy())), op.eps());
  }
  absl::Status run(const ops::HeadRmsNormGradView &op) {
    return normRowsGrad(op.dy(), op.x(), op.w(), op.dx(), op.dw(),
                        rowsOf(in(op.dy())) * op.heads(), last(in(op.w())),
                        op.eps());
  }
  absl::Status normRows(uint32_t x, uint32_t w, uint32_t y, int64_t T,
                        int64_t H, float eps) {
    if (bf16)
      return rmsNormForward(bits(x), bits(w), bits(y), T, H, eps, stream);
    return rmsNormForward(f32(x), f32(w), f32(y), T, H, eps, stream);
  }
  absl::Status normRowsGrad(uint32_t dy, uint32_t x, uint32_t w, uint32_t dx,
                            uint32_t dw, int64_t T, int64_t H, float eps) {
    if (bf16)
      return rmsNormBackward(bits(dy), bits(x), bits(w), bits(dx), f32(dw), T,
                             H, eps, stream);
    return rmsNormBackward(f32(dy), f32(x), f32(w), f32(dx), f32(dw), T, H,
                           eps, stream);
  }
  absl::Status run(const ops::LinearView &op) {
    // y[T, N] = x[T, K] w[N, K]^T.
    int64_t T = rowsOf(in(op.x())), K = last(in(op.x())),
            N = in(op.w()).shape[0];
    GemmSpec spec;
    spec.transB = true;
    spec.m = T, spec.n = N, spec.k = K, spec.lda = K, spec.ldb = K,
    spec.ldc = N;
    return step.gemmOnBuffers(spec, op.x(), op.w(), op.y());
  }
  absl::Status run(const ops::LinearGradInputView &op) {
    // dx[T, K] = dy[T, N] w[N, K].
    int64_t T = rowsOf(in(op.dy())), N = last(in(op.dy())),
            K = in(op.w()).shape[1];
    GemmSpec spec;
    spec.m = T, spec.n = K, spec.k = N, spec.lda = N, spec.ldb = K,
    spec.ldc = K;
    return step.gemmOnBuffers(spec, op.dy(), op.w(), op.dx());
  }
  absl::Status run(const ops::LinearGradWeightView &op) {
    // dw[N, K] = dy[T, N]^T x[T, K].
    int64_t T = rowsOf(in(op.dy())), N = last(in(op.dy())),
            K = last(in(op.x()));
    GemmSpec spec;
    spec.transA = true;
    spec.m = N, spec.n = K, spec.k = T, spec.lda = N, spec.ldb = K,
    spec.ldc = K;
    return step.gemmOnBuffers(spec, op.dy(), op.x(), op.dw());
  }
  absl::Status run(const ops::RopeView &op) {
    return rope(true, op.x(), op.y(), op.heads(), op.theta());
  }
  absl::Status run(const ops::RopeGradView &op) {
    return rope(false, op.dy(), op.dx(), op.heads(), op.theta());
  }
  absl::Status run(const ops::AttentionView &op) {
    if (bf16)
      return runTensorCoreAttention(step, index);
    const std::vector<int64_t> &q = in(op.q()).shape;
    int64_t heads = op.heads();
    return attentionForward(f32(op.q()), f32(op.k()), f32(op.v()),
                            f32(op.out()), f32(op.lse()), q[0], q[1], heads,
                            op.kvHeads(), q[2] / heads, stream);
  }
  absl::Status run(const ops::AttentionGradView &op) {
    if (bf16)
      return runTensorCoreAttention(step, index);
    const std::vector<int64_t> &q = in(op.q()).shape;
    int64_t heads = op.heads();
    MOE_DEVICE_BUFFER(float, workspace,
                      attentionBackwardWorkspaceBytes(q[0], q[1], heads) /
                          sizeof(float),
                      stream);
    return attentionBackward(
        f32(op.dout()), f32(op.q()), f32(op.k()), f32(op.v()), f32(op.out()),
        f32(op.lse()), f32(op.dq()), f32(op.dk()), f32(op.dv()), q[0], q[1],
        heads, op.kvHeads(), q[2] / heads, workspace.get(), stream);
  }
  absl::Status run(const ops::RouterView &op) {
    return routerForward(f32(op.logits()), f32(op.probs()), f32(op.weights()),
                         i32(op.indices()), rowsOf(in(op.logits())),
                         last(in(op.logits())), op.topK(), op.capacityFactor(),
                         stream);
  }
  absl::Status run(const ops::RouterGradView &op) {
    std::optional<uint32_t> dprobs = op.dprobs();
    return routerBackward(f32(op.dweights()), dprobs ? f32(*dprobs) : nullptr,
                          f32(op.probs()), f32(op.dlogits()),
                          rowsOf(in(op.probs())), last(in(op.probs())),
                          op.topK(), stream);
  }
  absl::Status run(const ops::ExpertsView &) {
    return runExpertsForward(step, index);
  }
  absl::Status run(const ops::ExpertsGradView &) {
    return runExpertsBackward(step, index);
  }
  absl::Status run(const ops::ExpertsWithHiddenView &) {
    return runExpertsForward(step, index);
  }
  absl::Status run(const ops::ExpertsGradWithHiddenView &) {
    return runExpertsBackward(step, index);
  }
  absl::Status run(const ops::SwigluView &op) {
    int64_t n = in(op.gate()).numElements();
    if (bf16)
      return swigluForward(bits(op.gate()), bits(op.up()), bits(op.y()), n,
                           stream);
    return swigluForward(f32(op.gate()), f32(op.up()), f32(op.y()), n, stream);
  }
  absl::Status run(const ops::SwigluGradView &op) {
    int64_t n = in(op.dy()).numElements();
    if (bf16)
      return swigluBackward(bits(op.dy()), bits(op.gate()), bits(op.up()),
                            bits(op.dgate()), bits(op.dup()), n, stream);
    return swigluBackward(f32(op.dy()), f32(op.gate()), f32(op.up()),
                          f32(op.dgate()), f32(op.dup()), n, stream);
  }
  absl::Status run(const ops::AddView &op) {
    int64_t n = in(op.a()).numElements();
    if (bf16)
      return add(bits(op.a()), bits(op.b()), bits(op.y()), n, stream);
    return add(f32(op.a()), f32(op.b()), f32(op.y()), n, stream);
  }
  absl::Status run(const ops::CrossEntropyView &op) {
    return crossEntropy(step, index, op, bf16);
  }
  absl::Status run(const ops::CrossEntropyGradView &op) {
    return crossEntropyGrad(step, index, op, bf16);
  }
  absl::Status run(const ops::AuxLossView &op) {
    return auxLoss(step, op.probs(), op.topK(), op.group(), std::nullopt,
                   op.loss());
  }
  absl::Status run(const ops::AuxLossGradView &op) {
    return auxLoss(step, op.probs(), op.topK(), op.group(), op.dloss(),
                   op.dprobs());
  }
  absl::Status run(const ops::WeightedSumView &op) {
    const std::vector<uint32_t> &scalars = op.scalars();
    // The terms' device values are current whether or not the host knows
    // them (writeScalar writes through).
    if (step.check &&
        static_cast<int64_t>(scalars.size()) <= kMaxWeightedTerms) {
      std::vector<const float *> values;
      for (uint32_t scalar : scalars)
        values.push_back(f32(scalar));
      return weightedSum(values.data(), op.coefficients().data(),
                         static_cast<int64_t>(values.size()), f32(op.sum()),
                         stream);
    }
    std::vector<float> values(scalars.size());
    for (size_t i = 0; i < scalars.size(); ++i) {
      absl::StatusOr<float> value = step.readScalar(scalars[i]);
      if (!value.ok())
        return value.status();
      values[i] = *value;
    }
    return step.writeScalar(
        op.sum(), semantics::weightedSum(op.coefficients().data(),
                                         values.data(), values.size()));
  }
  absl::Status run(const ops::ConstantView &op) {
    return fill(f32(op.y()), op.value(), in(op.y()).numElements(), stream);
  }
  absl::Status run(const ops::GlobalNormView &op) {
    return globalNorm(step, op);
  }
  absl::Status run(const ops::ClipCoefficientView &op) {
    // PyTorch clip_grad_norm_, as on the CPU.
    if (step.check)
      return clipCoefficient(op.maxNorm(), f32(op.norm()), f32(op.coef()),
                             stream);
    absl::StatusOr<float> norm = step.readScalar(op.norm());
    if (!norm.ok())
      return norm.status();
    return step.writeScalar(op.coef(),
                            semantics::clipCoefficient(op.maxNorm(), *norm));
  }
  absl::Status run(const ops::LearningRateView &op) {
    absl::StatusOr<int32_t> at = step.readStep(op.step());
    if (!at.ok())
      return at.status();
    return step.writeScalar(
        op.lr(),
        cpu::learningRate(*at, op.peak(), op.min(), op.warmup(), op.decay()));
  }
  absl::Status run(const ops::AdamWView &op) {
    return adamwUpdate(step, index, op);
  }
  // Refused at load (checkCapabilities: sharded_optimizer), so never run.
  absl::Status run(const ops::ShardedAdamWView &) {
    return absl::UnimplementedError(
        absl::StrCat(describeInstruction(step.program, index),
                     ": ZeRO-1's sharded AdamW does not run on the cuda "
                     "backend (capability sharded_optimizer)"));
  }
  absl::Status run(const ops::AllReduceView &op) {
    return collective(step, index, CollectiveKind::AllReduce, op.x(), op.y(),
                      op.group(), 0);
  }
  absl::Status run(const ops::AllGatherView &op) {
    return collective(step, index, CollectiveKind::AllGather, op.x(), op.y(),
                      op.group(), op.dim());
  }
  absl::Status run(const ops::ReduceScatterView &op) {
    return collective(step, index, CollectiveKind::ReduceScatter, op.x(),
                      op.y(), op.group(), op.dim());
  }
  absl::Status run(const ops::SliceView &op) {
    return collective(step, index, CollectiveKind::Slice, op.x(), op.y(),
                      op.group(), op.dim());
  }
  absl::Status run(const ops::ReduceBucketView &op) {
    return reduceBucket(step, index, op);
  }
  absl::Status run(const ops::Fp8AmaxUpdateView &op) {
    return fp8AmaxUpdate(step, op);
  }
  absl::Status run(const ops::CastView &op) {
    // fp32 to BF16 rounds to nearest even, BF16 to fp32 is exact (checkCast:
    // the dtypes differ).
    int64_t n = in(op.x()).numElements();
    if (in(op.x()).dtype == DType::F32)
      return castToBf16(f32(op.x()), bits(op.y()), n, stream);
    return castFromBf16(bits(op.x()), f32(op.y()), n, stream);
  }
  // The CUDA backend has no fused LM head and no GEMM epilogue addends (its
  // capability record says so), so the load-time check refuses these
  // before a step runs.
  absl::Status run(const ops::LinearCrossEntropyView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::LinearCrossEntropyGradView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::ScoredRouterView &) { return notOnThisBackend(); }
  absl::Status run(const ops::ScoredRouterGradView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::SequenceAuxLossView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::SequenceAuxLossGradView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::AttentionValueDimView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::AttentionValueDimGradView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::ConcatHeadsView &) { return notOnThisBackend(); }
  absl::Status run(const ops::PipelineGradientSumView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::DocumentRopeView &) { return notOnThisBackend(); }
  absl::Status run(const ops::DocumentRopeGradView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::DocumentAttentionView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::DocumentAttentionGradView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::RingAttentionView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::RingAttentionGradView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::SplitHeadsView &) { return notOnThisBackend(); }
  absl::Status run(const ops::ZLossView &) { return notOnThisBackend(); }
  absl::Status run(const ops::ZLossGradView &) { return notOnThisBackend(); }
  absl::Status run(const ops::ExpertLoadView &) { return notOnThisBackend(); }
  absl::Status run(const ops::ExpertLoadUpdateView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::LinearAccumulateView &) {
    return notOnThisBackend();
  }
  absl::Status run(const ops::LinearGradInputAccumulateView &) {
    return notOnThisBackend();
  }
  absl::Status unknownOpcode(const Instruction &) {
    return absl::UnimplementedError(absl::StrCat(
        describeInstruction(step.program, index), ": unknown opcode"));
  }

private:
  absl::Status notOnThisBackend() const {
    return absl::FailedPreconditionError(
        absl::StrCat(describeInstruction(step.program, index),
                     ": the cuda backend does not run this fused "
                     "instruction (recompile for a GPU target)"));
  }

  const Buffer &in(uint32_t b) const { return step.buffer(b); }
  float *f32(uint32_t b) const { return step.f32(b); }
  int32_t *i32(uint32_t b) const { return step.i32(b); }
  uint16_t *bits(uint32_t b) const { return step.bf16(b); }

  /// RoPE forward, or backward (the transpose).
  absl::Status rope(bool forward, uint32_t x, uint32_t y, int64_t heads,
                    float theta) {
    const std::vector<int64_t> &shape = in(x).shape;
    int64_t B = shape[0], S = shape[1], headDim = shape[2] / heads;
    if (bf16)
      return forward ? ropeForward(bits(x), bits(y), B, S, heads, headDim,
                                   theta, stream)
                     : ropeBackward(bits(x), bits(y), B, S, heads, headDim,
                                    theta, stream);
    return forward ? ropeForward(f32(x), f32(y), B, S, heads, headDim, theta,
                                 stream)
                   : ropeBackward(f32(x), f32(y), B, S, heads, headDim, theta,
                                  stream);
  }

  const DeviceStep &step;
  size_t index;
  cudaStream_t stream;
  /// The instruction runs on BF16 storage (runsOnBf16Storage): its BF16
  /// buffers were not widened.
  bool bf16;
};

absl::Status runKernel(const DeviceStep &step, size_t index, bool bf16) {
  DeviceKernels kernels(step, index, bf16);
  return ops::dispatch(kernels, step.program.instructions[index]);
}

/// The opcodes whose kernels read and write BF16 buffers themselves: the
/// GEMMs, Cast, AdamW (its working copy) and the collectives.
bool handlesBf16(Opcode opcode) {
  switch (opcode) {
  case Opcode::Linear:
  case Opcode::LinearGradInput:
  case Opcode::LinearGradWeight:
  case Opcode::Cast:
  case Opcode::AdamW:
  case Opcode::AllReduce:
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
  case Opcode::Slice:
  case Opcode::ReduceBucket:
    return true;
  default:
    return false;
  }
}

/// Runs an instruction whose kernel computes in fp32 storage on fp32
/// scratch for its BF16 operands and results (see the file comment): the
/// operands widened exactly, the results rounded once to nearest even. A
/// buffer both read and written (in place) is widened and rounded back.
absl::Status runWidened(const DeviceStep &step, size_t index) {
  const Instruction &inst = step.program.instructions[index];
  std::vector<uint32_t> widened;
  auto isBf16 = [&](uint32_t b) {
    return step.buffer(b).dtype == DType::BF16 &&
           std::find(widened.begin(), widened.end(), b) == widened.end() &&
           !readsBf16Operand(step, index, b);
  };
  for (const std::vector<uint32_t> *set : {&inst.operands, &inst.results})
    for (uint32_t b : *set)
      if (isBf16(b))
        widened.push_back(b);
  bool onBf16Storage = runsOnBf16Storage(step, index);
  if (widened.empty() || handlesBf16(inst.opcode) || onBf16Storage)
    return runKernel(step, index, onBf16Storage);
  cudaStream_t stream = step.stream;
  std::vector<void *> pointers = step.pointers;
  std::vector<DeviceBuffer<float>> scratch;
  scratch.reserve(widened.size());
  for (uint32_t b : widened) {
    int64_t n = step.buffer(b).numElements();
    MOE_DEVICE_BUFFER(float, wide, n, stream);
    if (std::find(inst.operands.begin(), inst.operands.end(), b) !=
        inst.operands.end())
      MOE_CUDA_TRY(castFromBf16(step.bf16(b), wide.get(), n, stream));
    pointers[b] = wide.get();
    scratch.push_back(std::move(wide));
  }
  DeviceStep onScratch = step.withPointers(pointers);
  MOE_CUDA_TRY(runKernel(onScratch, index, /*bf16=*/false));
  for (size_t i = 0; i < widened.size(); ++i) {
    uint32_t b = widened[i];
    if (std::find(inst.results.begin(), inst.results.end(), b) !=
        inst.results.end())
      MOE_CUDA_TRY(castToBf16(scratch[i].get(), step.bf16(b),
                              step.buffer(b).numElements(), stream));
  }
  return absl::OkStatus();
}

} // namespace

absl::Status runDeviceInstruction(const DeviceStep &step, size_t index) {
  step.forgetResultsOf(index);
  absl::Status status = runWidened(step, index);
  // Data errors name the instruction already ("instruction 3 (...) ...").
  if (status.ok() || absl::StartsWith(status.message(), "instruction "))
    return status;
  return absl::Status(status.code(),
                      absl::StrCat(describeInstruction(step.program, index),
                                   ": ", status.message()));
}

} // namespace moe::rt::cuda
