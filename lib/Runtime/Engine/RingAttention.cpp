//===- RingAttention.cpp - attention over a ring of sequence blocks -------===//
//
// Context parallelism's ring (RingAttention, RingAttentionGrad): each rank
// of the sequence group holds its block of the sequence (two runs under
// cp's load-balanced split) of q, k and v. For n ranks, n steps: at step s
// the rank attends its queries to the key/value block of rank r - s
// (cpu::attentionChunkForward per pair of runs, merged by the online
// softmax) while the block of rank r - s - 1 travels to it from rank r - 1.
// The backward passes the blocks the same way and, behind each, the block's
// dk and dv accumulators: each rank adds its queries' share and sends them
// on, so after n steps every block's gradients are back with their owner,
// summed in ring order from the owner on.
//
// With an MPI that lets a second thread call it, a communication thread
// moves the next block while this one computes; otherwise the transfer
// follows the compute.
//
//===----------------------------------------------------------------------===//
#include "RingAttention.h"

#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cpu/Kernels.h"
#include "moe/Runtime/IO/Trace.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <limits>
#include <thread>
#include <vector>

namespace moe::rt::engine {
namespace {

// comm::Group's point-to-point tags are 0..32767; the sequence group
// carries nothing else point to point.
constexpr int kBlockTag = 32765, kGradientTag = 32766;

using cpu::SequenceRun;

/// One ring instruction's operands and shapes.
struct Ring {
  int64_t B, S, heads, kvHeads, d, dv, qWidth, kWidth, vWidth, oWidth;
  comm::Group *group;
  int64_t n, rank;
  std::vector<std::vector<SequenceRun>> runs; // per group rank
  bool overlap;
  io::Trace *trace;
  const std::vector<uint8_t *> *pointers;
  /// The queries' document positions [B, S], or null.
  const int32_t *positions;
  /// Multiplies the softmax scale 1/sqrt(d) (the op's scale_factor).
  float scaleFactor;

  int64_t blockFloats() const { return B * S * (kWidth + vWidth); }
  float *f32(uint32_t b) const {
    return reinterpret_cast<float *>((*pointers)[b]);
  }
  /// This rank's key/value block as one message: k, then v.
  std::vector<float> ownBlock(uint32_t k, uint32_t v) const {
    std::vector<float> block(blockFloats());
    std::copy_n(f32(k), B * S * kWidth, block.begin());
    std::copy_n(f32(v), B * S * vWidth, block.begin() + B * S * kWidth);
    return block;
  }
};

/// Rows `run` of a [B, S, width] tensor as [B, run.length, width].
template <typename T>
std::vector<T> rowsOf(const T *x, int64_t B, int64_t S, int64_t width,
                      const SequenceRun &run) {
  std::vector<T> rows(B * run.length * width);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(x + (b * S + run.local) * width, run.length * width,
                rows.begin() + b * run.length * width);
  return rows;
}
/// The inverse: rows back into the [B, S, width] tensor.
void putRows(const std::vector<float> &rows, float *x, int64_t B, int64_t S,
             int64_t width, const SequenceRun &run) {
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(rows.begin() + b * run.length * width, run.length * width,
                x + (b * S + run.local) * width);
}
/// Columns `run` of a [B, heads, S] tensor as [B, heads, run.length], and
/// back.
std::vector<float> columnsOf(const float *x, int64_t rowsCount, int64_t S,
                             const SequenceRun &run) {
  std::vector<float> part(rowsCount * run.length);
  for (int64_t row = 0; row < rowsCount; ++row)
    std::copy_n(x + row * S + run.local, run.length,
                part.begin() + row * run.length);
  return part;
}
void putColumns(const std::vector<float> &part, float *x, int64_t rowsCount,
                int64_t S, const SequenceRun &run) {
  for (int64_t row = 0; row < rowsCount; ++row)
    std::copy_n(part.begin() + row * run.length, run.length,
                x + row * S + run.local);
}

/// Sends `send` to the next rank of the ring and receives `recv` from the
/// previous one.
absl::Status passOn(const Ring &ring, absl::Span<const float> send,
                    absl::Span<float> recv, int tag, const char *what) {
  io::TraceScope span(ring.trace, io::TraceTrack::Communication, what);
  int next = static_cast<int>((ring.rank + 1) % ring.n);
  int previous = static_cast<int>((ring.rank + ring.n - 1) % ring.n);
  absl::StatusOr<comm::Request> sent = ring.group->startSend(send, next, tag);
  if (!sent.ok())
    return sent.status();
  absl::StatusOr<comm::Request> received =
      ring.group->startRecv(recv, previous, tag);
  if (!received.ok())
    return received.status();
  if (absl::Status status = received->wait(); !status.ok())
    return status;
  return sent->wait();
}

/// Runs `compute` while `transfer` moves a block: on a second thread when
/// the MPI allows it, else after the compute.
absl::Status overlapped(const Ring &ring, const std::function<void()> &compute,
                        const std::function<absl::Status()> &transfer) {
  if (!ring.overlap) {
    compute();
    return transfer();
  }
  absl::Status status;
  std::thread communication([&] { status = transfer(); });
  compute();
  communication.join();
  return status;
}

/// The key block of rank `src` (k then v, [B, S, kWidth] and [B, S,
/// vWidth]) packed in one message.
struct KeyBlock {
  const float *k, *v;
};
KeyBlock keyBlock(const Ring &ring, const std::vector<float> &message) {
  return {message.data(), message.data() + ring.B * ring.S * ring.kWidth};
}

/// Whether the keys of `keys` come after every query of `queries`: the
/// pair contributes nothing (causal).
bool masked(const SequenceRun &queries, const SequenceRun &keys) {
  return keys.whole > queries.whole + queries.length - 1;
}

absl::Status forward(const Ring &ring, const ops::RingAttentionView &op) {
  auto f32 = [&](uint32_t b) { return ring.f32(b); };
  const int32_t *positions = ring.positions;
  const std::vector<SequenceRun> &mine = ring.runs[ring.rank];
  // Per query run: its rows, document positions and running results.
  struct QueryRun {
    std::vector<float> q, out, lse;
    std::vector<int32_t> positions;
  };
  std::vector<QueryRun> queries;
  for (const SequenceRun &run : mine) {
    QueryRun query;
    query.q = rowsOf(f32(op.q()), ring.B, ring.S, ring.qWidth, run);
    if (positions)
      query.positions = rowsOf(positions, ring.B, ring.S, 1, run);
    query.out.assign(ring.B * run.length * ring.oWidth, 0.0f);
    query.lse.assign(ring.B * ring.heads * run.length,
                     -std::numeric_limits<float>::infinity());
    queries.push_back(std::move(query));
  }
  std::vector<float> current = ring.ownBlock(op.k(), op.v()),
                     next(ring.blockFloats());
  for (int64_t step = 0; step < ring.n; ++step) {
    int64_t src = (ring.rank - step + ring.n) % ring.n;
    auto compute = [&] {
      io::TraceScope span(ring.trace, io::TraceTrack::Compute,
                          "ring attention block");
      KeyBlock block = keyBlock(ring, current);
      // Each query run merges the key runs in their order.
      for (const SequenceRun &keys : ring.runs[src]) {
        std::vector<float> k =
            rowsOf(block.k, ring.B, ring.S, ring.kWidth, keys);
        std::vector<float> v =
            rowsOf(block.v, ring.B, ring.S, ring.vWidth, keys);
        for (size_t i = 0; i < mine.size(); ++i) {
          if (masked(mine[i], keys))
            continue;
          QueryRun &query = queries[i];
          cpu::attentionChunkForward(
              query.q.data(), k.data(), v.data(), query.out.data(),
              query.lse.data(), ring.B, mine[i].length, keys.length,
              mine[i].whole, keys.whole, ring.heads, ring.kvHeads, ring.d,
              ring.dv, positions ? query.positions.data() : nullptr,
              ring.scaleFactor);
        }
      }
    };
    if (step + 1 == ring.n) {
      compute();
      break;
    }
    if (absl::Status status =
            overlapped(ring, compute,
                       [&] {
                         return passOn(ring, current, absl::MakeSpan(next),
                                       kBlockTag, "ring attention keys");
                       });
        !status.ok())
      return status;
    std::swap(current, next);
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    putRows(queries[i].out, f32(op.out()), ring.B, ring.S, ring.oWidth,
            mine[i]);
    putColumns(queries[i].lse, f32(op.lse()), ring.B * ring.heads, ring.S,
               mine[i]);
  }
  return absl::OkStatus();
}

absl::Status backward(const Ring &ring, const ops::RingAttentionGradView &op) {
  auto f32 = [&](uint32_t b) { return ring.f32(b); };
  const int32_t *positions = ring.positions;
  const std::vector<SequenceRun> &mine = ring.runs[ring.rank];
  struct QueryRun {
    std::vector<float> dout, q, out, lse, dq;
    std::vector<int32_t> positions;
  };
  std::vector<QueryRun> queries;
  for (const SequenceRun &run : mine) {
    QueryRun query;
    query.dout = rowsOf(f32(op.dout()), ring.B, ring.S, ring.oWidth, run);
    query.q = rowsOf(f32(op.q()), ring.B, ring.S, ring.qWidth, run);
    query.out = rowsOf(f32(op.out()), ring.B, ring.S, ring.oWidth, run);
    query.lse = columnsOf(f32(op.lse()), ring.B * ring.heads, ring.S, run);
    query.dq.assign(query.q.size(), 0.0f);
    if (positions)
      query.positions = rowsOf(positions, ring.B, ring.S, 1, run);
    queries.push_back(std::move(query));
  }
  int64_t kFloats = ring.B * ring.S * ring.kWidth;
  std::vector<float> current = ring.ownBlock(op.k(), op.v()),
                     next(ring.blockFloats());
  // The gradients of the block at hand, dk then dv, laid out as the block.
  std::vector<float> grads(ring.blockFloats(), 0.0f),
      nextGrads(ring.blockFloats());
  for (int64_t step = 0; step < ring.n; ++step) {
    int64_t src = (ring.rank - step + ring.n) % ring.n;
    auto compute = [&] {
      io::TraceScope span(ring.trace, io::TraceTrack::Compute,
                          "ring attention block gradient");
      KeyBlock block = keyBlock(ring, current);
      float *dk = grads.data(), *dv = grads.data() + kFloats;
      for (const SequenceRun &keys : ring.runs[src]) {
        std::vector<float> k =
            rowsOf(block.k, ring.B, ring.S, ring.kWidth, keys);
        std::vector<float> v =
            rowsOf(block.v, ring.B, ring.S, ring.vWidth, keys);
        std::vector<float> dkRun =
            rowsOf(dk, ring.B, ring.S, ring.kWidth, keys);
        std::vector<float> dvRun =
            rowsOf(dv, ring.B, ring.S, ring.vWidth, keys);
        for (size_t i = 0; i < mine.size(); ++i) {
          if (masked(mine[i], keys))
            continue;
          QueryRun &query = queries[i];
          cpu::attentionChunkBackward(
              query.dout.data(), query.q.data(), k.data(), v.data(),
              query.out.data(), query.lse.data(), query.dq.data(), dkRun.data(),
              dvRun.data(), ring.B, mine[i].length, keys.length, mine[i].whole,
              keys.whole, ring.heads, ring.kvHeads, ring.d, ring.dv,
              positions ? query.positions.data() : nullptr, ring.scaleFactor);
        }
        putRows(dkRun, dk, ring.B, ring.S, ring.kWidth, keys);
        putRows(dvRun, dv, ring.B, ring.S, ring.vWidth, keys);
      }
    };
    // The next key block travels while this one's gradients are computed;
    // the gradients follow once complete, and after the last step return
    // to their owner.
    if (step + 1 < ring.n) {
      if (absl::Status status = overlapped(
              ring, compute,
              [&] {
                return passOn(ring, current, absl::MakeSpan(next), kBlockTag,
                              "ring attention keys (backward)");
              });
          !status.ok())
        return status;
      std::swap(current, next);
    } else {
      compute();
    }
    if (ring.n > 1) {
      if (absl::Status status =
              passOn(ring, grads, absl::MakeSpan(nextGrads), kGradientTag,
                     "ring attention key gradients");
          !status.ok())
        return status;
      std::swap(grads, nextGrads);
    }
  }
  std::copy_n(grads.begin(), kFloats, f32(op.dk()));
  std::copy_n(grads.begin() + kFloats, ring.B * ring.S * ring.vWidth,
              f32(op.dv()));
  for (size_t i = 0; i < mine.size(); ++i)
    putRows(queries[i].dq, f32(op.dq()), ring.B, ring.S, ring.qWidth, mine[i]);
  return absl::OkStatus();
}

template <class View> Ring ringOf(const View &op, const StepContext &context) {
  const Program &program = context.program;
  const std::vector<int64_t> &q = program.buffers[op.q()].shape;
  Ring ring;
  ring.B = q[0];
  ring.S = q[1];
  ring.heads = op.heads();
  ring.kvHeads = op.kvHeads();
  ring.scaleFactor = op.scaleFactor().value_or(1.0f);
  ring.qWidth = q[2];
  ring.d = q[2] / ring.heads;
  ring.kWidth = program.buffers[op.k()].shape[2];
  ring.vWidth = program.buffers[op.v()].shape[2];
  ring.dv = ring.vWidth / ring.kvHeads;
  ring.oWidth = ring.heads * ring.dv;
  ring.group = context.groups[op.sequence()].get();
  ring.n = ring.group->size();
  ring.rank = ring.group->rank();
  const AxisList &axes = program.groups[op.sequence()];
  for (int64_t g = 0; g < ring.n; ++g)
    ring.runs.push_back(sequenceBlockRuns(program, axes, ring.S, g));
  ring.overlap = context.threadsMayCommunicate && ring.n > 1;
  ring.trace = context.trace;
  ring.pointers = &context.pointers;
  ring.positions =
      op.positions()
          ? reinterpret_cast<const int32_t *>(context.pointers[*op.positions()])
          : nullptr;
  return ring;
}

} // namespace

absl::Status runRingAttention(const StepContext &context, size_t index) {
  const Instruction &inst = context.program.instructions[index];
  absl::Status status;
  if (inst.opcode == Opcode::RingAttention) {
    ops::RingAttentionView op(inst);
    status = forward(ringOf(op, context), op);
  } else {
    ops::RingAttentionGradView op(inst);
    status = backward(ringOf(op, context), op);
  }
  if (status.ok())
    return status;
  return absl::Status(status.code(),
                      absl::StrCat(describeInstruction(context.program, index),
                                   ": ", status.message()));
}

} // namespace moe::rt::engine
