//===- Collectives.cpp - AllReduce, AllGather, ReduceScatter, Slice -------===//
//
// Around dimension `dim`, a tensor whose per-rank block has shape `block` is
// [outer, parts, chunk] with outer = the product of block[0, dim) and chunk
// = the product of block[dim, rank): rank r's block is the chunks [o, r, :]
// for every o. With outer = 1 the blocks are contiguous and go to the
// communication layer as they are.
//
//===----------------------------------------------------------------------===//

#include "Collectives.h"

#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/StepSemantics.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>

namespace moe::rt::engine {
namespace {

using Blocks = semantics::CollectiveBlocks;

Blocks blocksAround(const std::vector<int64_t> &block, int64_t dim) {
  return semantics::blocksAround(block.data(),
                                 static_cast<int64_t>(block.size()), dim);
}

enum class Kind { AllReduce, AllGather, ReduceScatter, Slice };

/// A collective instruction's operands and attributes, read through its
/// view.
struct Collective {
  Kind kind;
  uint32_t x, y;
  int64_t group;
  int64_t dim = 0;

  /// One rank's block: the operand of an AllGather, the result of a
  /// ReduceScatter or Slice.
  uint32_t block() const { return kind == Kind::AllGather ? x : y; }
  /// The whole (gathered or unscattered) tensor.
  uint32_t whole() const { return kind == Kind::AllGather ? y : x; }
};

/// The backend of ops::dispatch that reads collectives.
struct CollectiveOf {
  std::optional<Collective> run(const ops::AllReduceView &op) {
    return Collective{Kind::AllReduce, op.x(), op.y(), op.group()};
  }
  std::optional<Collective> run(const ops::AllGatherView &op) {
    return Collective{Kind::AllGather, op.x(), op.y(), op.group(), op.dim()};
  }
  std::optional<Collective> run(const ops::ReduceScatterView &op) {
    return Collective{Kind::ReduceScatter, op.x(), op.y(), op.group(),
                      op.dim()};
  }
  std::optional<Collective> run(const ops::SliceView &op) {
    return Collective{Kind::Slice, op.x(), op.y(), op.group(), op.dim()};
  }
  template <class View> std::optional<Collective> run(const View &) {
    return std::nullopt;
  }
  std::optional<Collective> unknownOpcode(const Instruction &) {
    return std::nullopt;
  }
};

std::optional<Collective> collectiveOf(const Instruction &inst) {
  CollectiveOf reader;
  return ops::dispatch(reader, inst);
}

/// Copies chunk (o, r) of a [outer, parts, chunk] tensor to or from slot
/// r of a [parts, outer, chunk] packing, for every o and r.
template <typename T>
void interleave(const T *from, T *to, const Blocks &blocks, int64_t parts,
                bool pack) {
  size_t bytes = static_cast<size_t>(blocks.chunk) * sizeof(T);
  for (int64_t r = 0; r < parts; ++r)
    for (int64_t o = 0; o < blocks.outer; ++o) {
      int64_t strided = semantics::stridedOffset(blocks, parts, o, r);
      int64_t packed = semantics::packedOffset(blocks, o, r);
      if (pack)
        std::memcpy(to + packed, from + strided, bytes);
      else
        std::memcpy(to + strided, from + packed, bytes);
    }
}

/// The collective along a dimension split load-balanced over a group that
/// cp leads (context parallelism): rank r's block is the runs
/// semantics::balancedRuns gives it, so rows move run by run between the
/// whole tensor and the rank-ordered packing [parts, block].
template <typename T>
absl::Status balancedCollectiveOn(const StepContext &context,
                                  const Collective &op, const T *x, T *y,
                                  int64_t cp) {
  const Program &program = context.program;
  comm::Group &group = *context.groups[op.group];
  int64_t parts = group.size();
  const std::vector<int64_t> &shape = program.buffers[op.block()].shape;
  Blocks blocks = blocksAround(shape, op.dim);
  int64_t width = shape[op.dim], inner = blocks.chunk / width;
  int64_t whole = width * parts, block = blocks.outer * blocks.chunk;
  // Calls move(offset in the block, offset in the whole, elements) for
  // every run of rank r's block.
  auto forEachRun = [&](int64_t r, auto move) {
    semantics::SequenceRuns runs = semantics::balancedRuns(whole, cp, parts, r);
    for (int64_t o = 0; o < blocks.outer; ++o)
      for (int i = 0; i < runs.count; ++i)
        move((o * width + runs.local[i]) * inner,
             (o * whole + runs.whole[i]) * inner, runs.length[i] * inner);
  };
  T *pack = reinterpret_cast<T *>(context.packScratch.data());
  switch (op.kind) {
  case Kind::AllGather: {
    if (absl::Status status = group.allGather(
            absl::MakeConstSpan(x, block), absl::MakeSpan(pack, parts * block));
        !status.ok())
      return status;
    for (int64_t r = 0; r < parts; ++r)
      forEachRun(r, [&](int64_t local, int64_t at, int64_t n) {
        std::memcpy(y + at, pack + r * block + local, n * sizeof(T));
      });
    return absl::OkStatus();
  }
  case Kind::ReduceScatter:
    for (int64_t r = 0; r < parts; ++r)
      forEachRun(r, [&](int64_t local, int64_t at, int64_t n) {
        std::memcpy(pack + r * block + local, x + at, n * sizeof(T));
      });
    return group.reduceScatterSum(absl::MakeConstSpan(pack, parts * block),
                                  absl::MakeSpan(y, block));
  case Kind::Slice:
    forEachRun(group.rank(), [&](int64_t local, int64_t at, int64_t n) {
      std::memcpy(y + local, x + at, n * sizeof(T));
    });
    return absl::OkStatus();
  case Kind::AllReduce:
    break;
  }
  return absl::InternalError("not a collective along a dimension");
}

/// The collective on elements of type T, the buffers' dtype: a message
/// carries what the buffer holds (BF16 at 2 bytes per element, summed as
/// comm::Bf16 says; ids as int32, which no float conversion touches).
template <typename T>
absl::Status collectiveOn(const StepContext &context, const Collective &op) {
  const Program &program = context.program;
  comm::Group &group = *context.groups[op.group];
  const Buffer &in = program.buffers[op.x];
  const Buffer &out = program.buffers[op.y];
  const T *x = reinterpret_cast<const T *>(context.pointers[op.x]);
  T *y = reinterpret_cast<T *>(context.pointers[op.y]);
  // Every rank has the same local shapes, so all of a group skip together.
  if (in.numElements() == 0 || out.numElements() == 0)
    return absl::OkStatus();

  if (op.kind == Kind::AllReduce) {
    std::memcpy(y, x, in.sizeInBytes());
    return group.allReduceSum(absl::MakeSpan(y, out.numElements()));
  }

  if (int64_t cp = program.balancedSplitOf(program.groups[op.group]); cp > 1)
    return balancedCollectiveOn(context, op, x, y, cp);
  int64_t parts = group.size();
  Blocks blocks = blocksAround(program.buffers[op.block()].shape, op.dim);
  int64_t block = blocks.outer * blocks.chunk;
  // Sized for packElements() floats, so it holds as many narrower ones.
  static_assert(sizeof(T) <= sizeof(float));
  T *pack = reinterpret_cast<T *>(context.packScratch.data());
  switch (op.kind) {
  case Kind::AllGather: {
    auto gather = [&](T *to) {
      return group.allGather(absl::MakeConstSpan(x, block),
                             absl::MakeSpan(to, parts * block));
    };
    if (blocks.outer == 1)
      return gather(y);
    if (absl::Status status = gather(pack); !status.ok())
      return status;
    interleave(pack, y, blocks, parts, /*pack=*/false);
    return absl::OkStatus();
  }
  case Kind::ReduceScatter:
    if (blocks.outer == 1)
      return group.reduceScatterSum(absl::MakeConstSpan(x, parts * block),
                                    absl::MakeSpan(y, block));
    interleave(x, pack, blocks, parts, /*pack=*/true);
    return group.reduceScatterSum(absl::MakeConstSpan(pack, parts * block),
                                  absl::MakeSpan(y, block));
  case Kind::Slice: {
    // This rank's block is the one its group rank numbers: both are the
    // row-major index of its coordinates on the group's axes.
    size_t bytes = static_cast<size_t>(blocks.chunk) * sizeof(T);
    for (int64_t o = 0; o < blocks.outer; ++o)
      std::memcpy(y + o * blocks.chunk,
                  x + (o * parts + group.rank()) * blocks.chunk, bytes);
    return absl::OkStatus();
  }
  case Kind::AllReduce:
    break;
  }
  return absl::InternalError("not a collective");
}

absl::Status collective(const StepContext &context, const Collective &op) {
  // The verifier allows f32, bf16 and (moves only) i32, the same for the
  // operand and the result.
  switch (context.program.buffers[op.x].dtype) {
  case DType::BF16:
    return collectiveOn<comm::Bf16>(context, op);
  case DType::I32:
    return collectiveOn<int32_t>(context, op);
  default:
    return collectiveOn<float>(context, op);
  }
}

/// The elements of a bucket's operands, all together.
int64_t bucketElements(const Program &program,
                       const ops::ReduceBucketView &op) {
  int64_t total = 0;
  for (uint32_t x : op.xs())
    total += program.buffers[x].numElements();
  return total;
}

/// A ReduceBucket on elements of type T: the operands packed into the pack
/// space, one collective, the results unpacked. For a reduce-scatter, slot
/// r of the packing holds block r of every operand in operand order, so
/// this rank's part of the sum is its blocks in that order; it lands after
/// the packing.
template <typename T>
absl::Status reduceBucketOn(const StepContext &context,
                            const ops::ReduceBucketView &op) {
  const Program &program = context.program;
  comm::Group &group = *context.groups[op.group()];
  const std::vector<uint32_t> &xs = op.xs(), &ys = op.ys();
  int64_t total = bucketElements(program, op);
  if (total == 0)
    return absl::OkStatus();
  static_assert(sizeof(T) <= sizeof(float));
  T *pack = reinterpret_cast<T *>(context.packScratch.data());
  auto at = [&](uint32_t b) {
    return reinterpret_cast<T *>(context.pointers[b]);
  };
  if (!op.scatter()) {
    int64_t offset = 0;
    for (uint32_t x : xs) {
      int64_t n = program.buffers[x].numElements();
      std::copy_n(at(x), n, pack + offset);
      offset += n;
    }
    if (absl::Status status = group.allReduceSum(absl::MakeSpan(pack, total));
        !status.ok())
      return status;
    offset = 0;
    for (uint32_t y : ys) {
      int64_t n = program.buffers[y].numElements();
      std::copy_n(pack + offset, n, at(y));
      offset += n;
    }
    return absl::OkStatus();
  }
  int64_t parts = group.size(), slot = total / parts;
  int64_t offset = 0;
  for (uint32_t x : xs) {
    int64_t block = program.buffers[x].numElements() / parts;
    for (int64_t r = 0; r < parts; ++r)
      std::copy_n(at(x) + r * block, block, pack + r * slot + offset);
    offset += block;
  }
  T *mine = pack + total;
  if (absl::Status status = group.reduceScatterSum(
          absl::MakeConstSpan(pack, total), absl::MakeSpan(mine, slot));
      !status.ok())
    return status;
  offset = 0;
  for (uint32_t y : ys) {
    int64_t block = program.buffers[y].numElements();
    std::copy_n(mine + offset, block, at(y));
    offset += block;
  }
  return absl::OkStatus();
}

absl::Status reduceBucket(const StepContext &context, size_t index) {
  ops::ReduceBucketView op(context.program.instructions[index]);
  // The verifier allows f32 and bf16, one for every operand and result.
  if (context.program.buffers[op.xs()[0]].dtype == DType::BF16)
    return reduceBucketOn<comm::Bf16>(context, op);
  return reduceBucketOn<float>(context, op);
}

} // namespace

bool isCollective(Opcode opcode) {
  return opcode == Opcode::AllReduce || opcode == Opcode::AllGather ||
         opcode == Opcode::ReduceScatter || opcode == Opcode::Slice ||
         opcode == Opcode::ReduceBucket;
}

int64_t packElementsOf(const Program &program, const Instruction &inst) {
  if (inst.opcode == Opcode::ReduceBucket) {
    ops::ReduceBucketView bucket(inst);
    int64_t total = bucketElements(program, bucket);
    // A reduce-scatter's own part of the sum follows the packing.
    int64_t parts = program.partsOf(program.groups[bucket.group()]);
    return total + (bucket.scatter() ? total / parts : 0);
  }
  std::optional<Collective> op = collectiveOf(inst);
  if (!op || (op->kind != Kind::AllGather && op->kind != Kind::ReduceScatter))
    return 0;
  // A load-balanced split (context parallelism) always packs.
  if (blocksAround(program.buffers[op->block()].shape, op->dim).outer == 1 &&
      program.balancedSplitOf(program.groups[op->group]) == 1)
    return 0;
  return program.buffers[op->whole()].numElements();
}

int64_t packElements(const Program &program) {
  int64_t most = 0;
  for (const Instruction &inst : program.instructions)
    most = std::max(most, packElementsOf(program, inst));
  return most;
}

absl::Status runCollective(const StepContext &context, size_t index) {
  const Instruction &inst = context.program.instructions[index];
  absl::Status status = inst.opcode == Opcode::ReduceBucket
                            ? reduceBucket(context, index)
                            : collective(context, *collectiveOf(inst));
  if (status.ok())
    return status;
  return absl::Status(status.code(),
                      absl::StrCat(describeInstruction(context.program, index),
                                   ": ", status.message()));
}

absl::Status gatherRows(comm::Group &group, const float *block, int64_t count,
                        void *whole, DType dtype) {
  int64_t total = count * group.size();
  if (dtype == DType::BF16) {
    std::vector<comm::Bf16> rounded(count);
    cpu::castToBf16(block, reinterpret_cast<uint16_t *>(rounded.data()), count);
    return group.allGather(
        rounded, absl::MakeSpan(static_cast<comm::Bf16 *>(whole), total));
  }
  // A copy: the block may lie inside `whole` (the fp32 weight's own rows).
  std::vector<float> rows(block, block + count);
  return group.allGather(rows,
                         absl::MakeSpan(static_cast<float *>(whole), total));
}

absl::Status runFp8AmaxUpdate(const StepContext &context, size_t index) {
  ops::Fp8AmaxUpdateView op(context.program.instructions[index]);
  const Buffer &buffer = context.program.buffers[op.history()];
  auto *history = reinterpret_cast<float *>(context.pointers[op.history()]);
  int64_t length = buffer.shape[2];
  int64_t rows = buffer.numElements() / length;
  if (std::optional<int64_t> groupIndex = op.group()) {
    // A maximum over the group from an all-gather of each rank's current
    // amaxes: the sums of the communication layer cannot take maxima, and
    // the rows are few (experts x 9).
    comm::Group &group = *context.groups[*groupIndex];
    std::vector<float> mine(rows), all(rows * group.size());
    for (int64_t r = 0; r < rows; ++r)
      mine[r] = history[r * length];
    if (absl::Status status = group.allGather(mine, absl::MakeSpan(all));
        !status.ok())
      return absl::Status(status.code(),
                          absl::StrCat(describeInstruction(context.program,
                                                           index),
                                       ": ", status.message()));
    for (int64_t r = 0; r < rows; ++r) {
      float amax = 0.0f;
      for (int rank = 0; rank < group.size(); ++rank) {
        float value = all[rank * rows + r];
        if (!(value <= amax)) // keeps a NaN
          amax = value;
      }
      history[r * length] = amax;
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    cpu::rollAmaxHistory(history + r * length, length);
  return absl::OkStatus();
}

} // namespace moe::rt::engine
