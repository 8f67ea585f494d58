//===- ExpertParallel.cpp - experts distributed over a group --------------===//
//
// One exchange plan serves both directions. This rank's assignments are
// sorted by global expert, token order within one (a stable counting sort,
// as the kernels group rows). Each rank owns a contiguous range of experts,
// so that order is also grouped by destination in group-rank order, which
// is how an all-to-all packs its send buffer. Rows come back in the order
// they left, so walking them adds each token's expert outputs in global
// expert order, the order of cpu::expertsForward and expertsBackward.
//
// Mixed precision: what is stored in BF16 travels as BF16. Rows leave with
// x and, backward, dy as BF16 (the values are BF16's, so exactly) and come
// back as BF16 too: each assignment's expert output (its input gradient,
// backward) is rounded to BF16 where it is computed, as the single-rank
// kernel rounds it before adding a token's assignments in fp32 (bf16Rows),
// so both give the same sums. Routing weights and their gradients are fp32
// and travel as fp32, in two BF16-sized words (RowLayout).
//
// Before any row moves, the ranks exchange headers: for each destination,
// the rows for each of its local experts and an error flag. The counts tell
// the receiver how many rows arrive and which local expert each is for
// (a source's rows arrive expert by expert), so no ids travel. The flag lets
// a rank that found a bad expert id stop the whole group in step, instead
// of leaving the others blocked in the row exchange until the deadline.
//
//===----------------------------------------------------------------------===//

#include "ExpertParallel.h"

#include "moe/Runtime/Artifact/ExpertsRecipe.h"
#include "moe/Runtime/Engine/ExpertExchange.h"

#include "moe/Runtime/IO/Trace.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/Cpu/Kernels.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace moe::rt::engine {
namespace {

/// One rank's view of an Experts or ExpertsGrad instruction.
struct ExpertOperands {
  const float *x;
  const float *weights;
  const int32_t *indices;
  const float *w1, *w3, *w2;
  int64_t tokens, hidden, ffn, localExperts, topK;
  const cpu::Fp8Gemms *fp8;
  io::Trace *trace;
  /// Stored in BF16: x, dy (backward) and the result y or dx.
  bool bf16X = false, bf16Dy = false, bf16Out = false;
};

/// How a row of floats travels: its segments in order, each as BF16 (values
/// that are BF16's, so the narrowing is exact) or as fp32 bits in two words.
class RowLayout {
public:
  RowLayout &add(int64_t width, bool bf16) {
    segments.push_back({width, bf16});
    floatWidth += width;
    wordWidth += bf16 ? width : 2 * width;
    return *this;
  }
  int64_t floats() const { return floatWidth; }
  int64_t words() const { return wordWidth; }
  bool allFp32() const { return wordWidth == 2 * floatWidth; }

  /// `rows` rows of floats() floats into rows of words() words.
  std::vector<comm::Bf16> pack(const std::vector<float> &rows) const {
    int64_t n = static_cast<int64_t>(rows.size()) / floatWidth;
    std::vector<comm::Bf16> wire(n * wordWidth);
    for (int64_t r = 0; r < n; ++r) {
      const float *from = rows.data() + r * floatWidth;
      comm::Bf16 *to = wire.data() + r * wordWidth;
      for (const Segment &segment : segments) {
        if (segment.bf16) {
          cpu::castToBf16(from, reinterpret_cast<uint16_t *>(to),
                          segment.width);
          to += segment.width;
        } else {
          std::memcpy(to, from, segment.width * sizeof(float));
          to += 2 * segment.width;
        }
        from += segment.width;
      }
    }
    return wire;
  }

  /// The inverse of pack().
  void unpack(const std::vector<comm::Bf16> &wire,
              std::vector<float> &rows) const {
    int64_t n = static_cast<int64_t>(wire.size()) / wordWidth;
    rows.resize(n * floatWidth);
    for (int64_t r = 0; r < n; ++r) {
      const comm::Bf16 *from = wire.data() + r * wordWidth;
      float *to = rows.data() + r * floatWidth;
      for (const Segment &segment : segments) {
        if (segment.bf16) {
          cpu::castFromBf16(reinterpret_cast<const uint16_t *>(from), to,
                            segment.width);
          from += segment.width;
        } else {
          std::memcpy(to, from, segment.width * sizeof(float));
          from += 2 * segment.width;
        }
        to += segment.width;
      }
    }
  }

private:
  struct Segment {
    int64_t width;
    bool bf16;
  };
  std::vector<Segment> segments;
  int64_t floatWidth = 0, wordWidth = 0;
};

/// Sends sendRows[d] rows of `width` floats of `send` (packed in group-rank
/// order) to group rank d and receives recvRows[i] rows from rank i into
/// `recv`, packed the same way.
/// `name` labels the exchange's span on the trace's communication track.
template <typename T>
absl::Status exchangeRows(comm::Group &group, const std::vector<T> &send,
                          const std::vector<int64_t> &sendRows,
                          std::vector<T> &recv,
                          const std::vector<int64_t> &recvRows, int64_t width,
                          io::Trace *trace, std::string name) {
  io::TraceScope span(trace, io::TraceTrack::Communication, std::move(name));
  std::vector<int64_t> sendCounts, recvCounts;
  for (int64_t rows : sendRows)
    sendCounts.push_back(rows * width);
  int64_t total = 0;
  for (int64_t rows : recvRows) {
    recvCounts.push_back(rows * width);
    total += rows * width;
  }
  recv.resize(total);
  return group.allToAll(send, sendCounts, comm::packedOffsets(sendCounts),
                        absl::MakeSpan(recv), recvCounts,
                        comm::packedOffsets(recvCounts));
}

struct ExpertGradients {
  float *dx, *dweights, *dw1, *dw3, *dw2;
};

/// One chunk of an instruction's tokens on its way through the experts:
/// dispatched, computed where its experts are, and combined back.
struct Chunk {
  ExpertOperands ops;        // this chunk's tokens
  const float *dy = nullptr; // ExpertsGrad: this chunk's dy
  int64_t firstToken = 0;
  ExpertExchangePlan plan;
  std::vector<float> arrived, results, returned;
  /// ExpertsGrad after the first chunk: its share of the weight gradients.
  std::vector<float> dw1, dw3, dw2;
};

/// The rows a chunk sends and gets back: forward [x] and [y]; backward
/// [x | dy | routing weight] and [dx | dweight].
RowLayout sentLayout(const ExpertOperands &ops, bool backward) {
  RowLayout layout;
  layout.add(ops.hidden, ops.bf16X);
  if (backward)
    layout.add(ops.hidden, ops.bf16Dy).add(1, false);
  return layout;
}
RowLayout backLayout(const ExpertOperands &ops, bool backward) {
  RowLayout layout;
  layout.add(ops.hidden, ops.bf16Out);
  if (backward)
    layout.add(1, false);
  return layout;
}
int64_t sentWidth(const Chunk &chunk, bool backward) {
  return sentLayout(chunk.ops, backward).floats();
}
int64_t backWidth(const Chunk &chunk, bool backward) {
  return backLayout(chunk.ops, backward).floats();
}

/// exchangeRows() of float rows laid out as `layout` says (rows of fp32
/// alone move as they are). The trace names the exchange `what`, with
/// "(bf16)" when BF16 travels, as "(fp8)" marks FP8 codes:
/// "expert dispatch (bf16, backward)".
absl::Status exchangeLaidOut(comm::Group &group, const RowLayout &layout,
                             const std::vector<float> &send,
                             const std::vector<int64_t> &sendRows,
                             std::vector<float> &recv,
                             const std::vector<int64_t> &recvRows,
                             io::Trace *trace, const char *what,
                             bool backward) {
  if (layout.allFp32())
    return exchangeRows(group, send, sendRows, recv, recvRows,
                        layout.floats(), trace,
                        absl::StrCat(what, backward ? " (backward)" : ""));
  std::vector<comm::Bf16> arrived;
  if (absl::Status status = exchangeRows(
          group, layout.pack(send), sendRows, arrived, recvRows,
          layout.words(), trace,
          absl::StrCat(what, backward ? " (bf16, backward)" : " (bf16)"));
      !status.ok())
    return status;
  layout.unpack(arrived, recv);
  return absl::OkStatus();
}

/// dispatch() with FP8 rows on the wire (Fp8Gemms::dispatch): tokens in
/// E4M3 and, backward, their gradients in the gradient format, with one
/// scale per block of a row, and the routing weight as fp32 bits; unpacked
/// on arrival into the rows dispatch() would have delivered, now on the
/// FP8 grid. A quarter of the bytes, for the rounding the expert GEMMs do
/// anyway.
absl::Status dispatchFp8(comm::Group &group, Chunk &chunk, bool backward) {
  const ExpertOperands &ops = chunk.ops;
  int64_t H = ops.hidden, block = ops.fp8->block;
  int64_t rowWords = cpu::packedFp8Words(H, block);
  int64_t words = backward ? 2 * rowWords + 1 : rowWords;
  cpu::Fp8Format gradients = cpu::fp8GradientFormat(*ops.fp8);
  std::vector<int32_t> sent(chunk.plan.slots.size() * words);
  for (size_t r = 0; r < chunk.plan.slots.size(); ++r) {
    int64_t slot = chunk.plan.slots[r], token = slot / ops.topK;
    int32_t *row = sent.data() + r * words;
    cpu::packFp8Row(ops.x + token * H, H, block, cpu::Fp8Format::E4M3, row);
    if (backward) {
      cpu::packFp8Row(chunk.dy + token * H, H, block, gradients,
                      row + rowWords);
      std::memcpy(row + 2 * rowWords, &ops.weights[slot], sizeof(float));
    }
  }
  std::vector<int32_t> arrived;
  if (absl::Status status = exchangeRows(
          group, sent, chunk.plan.sendRows, arrived, chunk.plan.recvRows,
          words, ops.trace,
          backward ? "expert dispatch (fp8, backward)"
                   : "expert dispatch (fp8)");
      !status.ok())
    return status;
  int64_t rows = static_cast<int64_t>(arrived.size()) / words;
  int64_t out = sentWidth(chunk, backward);
  chunk.arrived.resize(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t *row = arrived.data() + r * words;
    float *values = chunk.arrived.data() + r * out;
    cpu::unpackFp8Row(row, H, block, cpu::Fp8Format::E4M3, values);
    if (backward) {
      cpu::unpackFp8Row(row + rowWords, H, block, gradients, values + H);
      std::memcpy(values + 2 * H, row + 2 * rowWords, sizeof(float));
    }
  }
  return absl::OkStatus();
}

/// Agrees on the chunk's rows with the group and sends them to their
/// experts' ranks.
absl::Status dispatch(comm::Group &group, Chunk &chunk,
                      const absl::Status &routing, bool backward) {
  absl::StatusOr<ExpertExchangePlan> plan =
      planExpertExchange(group, chunk.ops.indices, chunk.ops.tokens,
                         chunk.ops.topK, chunk.ops.localExperts, routing,
                         chunk.ops.trace);
  if (!plan.ok())
    return plan.status();
  chunk.plan = std::move(*plan);
  const ExpertOperands &ops = chunk.ops;
  int64_t H = ops.hidden, out = sentWidth(chunk, backward);
  if (ops.fp8 && ops.fp8->dispatch)
    return dispatchFp8(group, chunk, backward);
  std::vector<float> sent(chunk.plan.slots.size() * out);
  for (size_t r = 0; r < chunk.plan.slots.size(); ++r) {
    int64_t slot = chunk.plan.slots[r], token = slot / ops.topK;
    float *row = sent.data() + r * out;
    std::copy(ops.x + token * H, ops.x + (token + 1) * H, row);
    if (backward) {
      std::copy(chunk.dy + token * H, chunk.dy + (token + 1) * H, row + H);
      row[2 * H] = ops.weights[slot];
    }
  }
  return exchangeLaidOut(group, sentLayout(ops, backward), sent,
                         chunk.plan.sendRows, chunk.arrived,
                         chunk.plan.recvRows, ops.trace, "expert dispatch",
                         backward);
}

/// Runs this rank's experts on the rows that arrived. Each arriving row is
/// one assignment with weight 1 (the routing weight is applied at the
/// source, as the kernel applies it); backward, the weight travels with
/// the row, and the local experts' weight gradients sum over every row of
/// the group's tokens.
void compute(Chunk &chunk, bool backward, float *dw1, float *dw3,
             float *dw2) {
  const ExpertOperands &ops = chunk.ops;
  int64_t H = ops.hidden, rows = chunk.plan.recvExperts.size();
  int64_t back = backWidth(chunk, backward);
  chunk.results.assign(rows * back, 0.0f);
  if (!backward) {
    std::vector<float> unit(rows, 1.0f);
    io::TraceScope span(ops.trace, io::TraceTrack::Compute, "Experts");
    cpu::expertsForward(chunk.arrived.data(), unit.data(),
                        chunk.plan.recvExperts.data(), ops.w1, ops.w3, ops.w2,
                        chunk.results.data(), rows, H, ops.ffn,
                        ops.localExperts, /*topK=*/1, ops.fp8, ops.bf16Out);
    return;
  }
  int64_t out = sentWidth(chunk, backward);
  std::vector<float> x(rows * H), dyRows(rows * H), w(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = chunk.arrived.data() + r * out;
    std::copy(row, row + H, x.begin() + r * H);
    std::copy(row + H, row + 2 * H, dyRows.begin() + r * H);
    w[r] = row[2 * H];
  }
  std::vector<float> dx(rows * H), dweights(rows);
  {
    io::TraceScope span(ops.trace, io::TraceTrack::Compute, "ExpertsGrad");
    cpu::expertsBackward(dyRows.data(), x.data(), w.data(),
                         chunk.plan.recvExperts.data(), ops.w1, ops.w3,
                         ops.w2, dx.data(), dweights.data(), dw1, dw3, dw2,
                         rows, H, ops.ffn, ops.localExperts, /*topK=*/1,
                         ops.fp8, ops.bf16Out);
  }
  for (int64_t r = 0; r < rows; ++r) {
    float *row = chunk.results.data() + r * back;
    std::copy(dx.begin() + r * H, dx.begin() + (r + 1) * H, row);
    row[H] = dweights[r];
  }
}

/// Sends the results back to the ranks of their tokens.
absl::Status combine(comm::Group &group, Chunk &chunk, bool backward) {
  return exchangeLaidOut(group, backLayout(chunk.ops, backward),
                         chunk.results, chunk.plan.recvRows, chunk.returned,
                         chunk.plan.sendRows, chunk.ops.trace,
                         "expert combine", backward);
}

/// Runs the chunks' dispatch, compute and combine. With `overlap`, a
/// communication thread does every exchange, in an order the same on all
/// ranks (dispatch 0, dispatch 1, combine 0, dispatch 2, combine 1, ...),
/// while this thread computes: chunk i + 1 travels while chunk i computes.
/// Only that thread calls the group meanwhile.
absl::Status runChunks(comm::Group &group, std::vector<Chunk> &chunks,
                       const absl::Status &routing, bool backward,
                       bool overlap, const ExpertGradients *grads) {
  const ExpertOperands &whole = chunks.front().ops;
  int64_t weights = whole.ffn * whole.hidden * whole.localExperts;
  auto computeChunk = [&](size_t c) {
    Chunk &chunk = chunks[c];
    if (!backward || c == 0) {
      compute(chunk, backward, grads ? grads->dw1 : nullptr,
              grads ? grads->dw3 : nullptr, grads ? grads->dw2 : nullptr);
      return;
    }
    chunk.dw1.resize(weights);
    chunk.dw3.resize(weights);
    chunk.dw2.resize(weights);
    compute(chunk, backward, chunk.dw1.data(), chunk.dw3.data(),
            chunk.dw2.data());
    // Added in chunk order, so the sums are the same on every run.
    for (int64_t i = 0; i < weights; ++i) {
      grads->dw1[i] += chunk.dw1[i];
      grads->dw3[i] += chunk.dw3[i];
      grads->dw2[i] += chunk.dw2[i];
    }
  };
  size_t n = chunks.size();
  if (!overlap || n == 1) {
    for (size_t c = 0; c < n; ++c) {
      if (absl::Status s = dispatch(group, chunks[c], routing, backward);
          !s.ok())
        return s;
      computeChunk(c);
      if (absl::Status s = combine(group, chunks[c], backward); !s.ok())
        return s;
    }
    return absl::OkStatus();
  }

  std::mutex mutex;
  std::condition_variable changed;
  size_t dispatched = 0, computed = 0;
  bool failed = false;
  absl::Status commStatus;
  std::thread communication([&] {
    auto fail = [&](absl::Status status) {
      std::lock_guard<std::mutex> lock(mutex);
      commStatus = std::move(status);
      failed = true;
      changed.notify_all();
    };
    for (size_t c = 0; c <= n; ++c) {
      if (c < n) {
        if (absl::Status s = dispatch(group, chunks[c], routing, backward);
            !s.ok())
          return fail(std::move(s));
        std::lock_guard<std::mutex> lock(mutex);
        dispatched = c + 1;
        changed.notify_all();
      }
      if (c == 0)
        continue;
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return computed >= c || failed; });
        if (failed)
          return;
      }
      if (absl::Status s = combine(group, chunks[c - 1], backward); !s.ok())
        return fail(std::move(s));
    }
  });
  for (size_t c = 0; c < n; ++c) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return dispatched > c || failed; });
      if (failed)
        break;
    }
    computeChunk(c);
    std::lock_guard<std::mutex> lock(mutex);
    computed = c + 1;
    changed.notify_all();
  }
  communication.join();
  return commStatus;
}

/// Adds every chunk's returned rows into this rank's outputs: y (forward),
/// or dx and dweights (backward; dropped slots keep dweights = 0).
void finish(const std::vector<Chunk> &chunks, bool backward, float *y,
            const ExpertGradients *grads) {
  const ExpertOperands &first = chunks.front().ops;
  int64_t H = first.hidden, topK = first.topK, tokens = 0;
  for (const Chunk &chunk : chunks)
    tokens += chunk.ops.tokens;
  float *out = backward ? grads->dx : y;
  std::fill(out, out + tokens * H, 0.0f);
  if (backward)
    std::fill(grads->dweights, grads->dweights + tokens * topK, 0.0f);
  for (const Chunk &chunk : chunks) {
    int64_t back = backWidth(chunk, backward);
    for (size_t r = 0; r < chunk.plan.slots.size(); ++r) {
      int64_t slot = chunk.plan.slots[r];
      int64_t token = chunk.firstToken + slot / topK;
      const float *row = chunk.returned.data() + r * back;
      float *target = out + token * H;
      float w = backward ? 1.0f : chunk.ops.weights[slot];
      for (int64_t i = 0; i < H; ++i)
        target[i] += w * row[i];
      if (backward)
        grads->dweights[chunk.firstToken * topK + slot] = row[H];
    }
  }
}

} // namespace

bool isExpertParallel(const Instruction &instruction) {
  std::optional<ops::ExpertsRecipe> recipe = ops::expertsRecipeOf(instruction);
  return recipe && recipe->group;
}

uint64_t kernelWorkspaceBytes(const Program &program,
                              std::optional<int32_t> pipelineRank) {
  uint64_t most = 0;
  const Pipeline &pipeline = program.pipeline;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction &inst = program.instructions[i];
    if (pipelineRank && pipeline.enabled() &&
        !pipeline.runsOn(i, *pipelineRank))
      continue;
    if (inst.opcode == Opcode::Attention ||
        inst.opcode == Opcode::AttentionGrad ||
        inst.opcode == Opcode::AttentionValueDim ||
        inst.opcode == Opcode::AttentionValueDimGrad) {
      // q is [B, S, heads * headDim], v [B, S, kvHeads * valueDim]; every
      // form has q and v at the same operands, heads and kv_heads first.
      static_assert(ops::AttentionView::kQOperand ==
                        ops::AttentionValueDimView::kQOperand &&
                    ops::AttentionGradView::kQOperand ==
                        ops::AttentionValueDimGradView::kQOperand);
      bool forward = inst.opcode == Opcode::Attention ||
                     inst.opcode == Opcode::AttentionValueDim;
      size_t q = forward ? ops::AttentionView::kQOperand
                         : ops::AttentionGradView::kQOperand;
      int64_t heads = std::max<int64_t>(1, inst.intAttrs[0]);
      int64_t kvHeads = std::max<int64_t>(1, inst.intAttrs[1]);
      const std::vector<int64_t> &shape =
          program.buffers[inst.operands[q]].shape;
      const std::vector<int64_t> &values =
          program.buffers[inst.operands[q + 2]].shape;
      most = std::max(most, cpu::attentionWorkspaceBytes(
                                shape[2] / heads, !forward, cpu::numThreads(),
                                values[2] / kvHeads));
      continue;
    }
    if (inst.opcode == Opcode::LinearCrossEntropy ||
        inst.opcode == Opcode::LinearCrossEntropyGrad) {
      // The logits block of the fused LM head: x [..., H], w [V, H].
      bool forward = inst.opcode == Opcode::LinearCrossEntropy;
      const Buffer &x =
          program.buffers[forward ? ops::LinearCrossEntropyView(inst).x()
                                  : ops::LinearCrossEntropyGradView(inst).x()];
      const Buffer &w =
          program.buffers[forward ? ops::LinearCrossEntropyView(inst).w()
                                  : ops::LinearCrossEntropyGradView(inst).w()];
      most = std::max(most, cpu::linearCrossEntropyWorkspaceBytes(
                                x.numElements() / x.shape.back(), w.shape[0]));
      continue;
    }
    std::optional<ops::ExpertsRecipe> recipe = ops::expertsRecipeOf(inst);
    if (!recipe)
      continue;
    bool backward = !recipe->forward;
    size_t first = recipe->firstOperand;
    const Buffer &x = program.buffers[inst.operands[first]];
    const Buffer &ids = program.buffers[inst.operands[first + 2]];
    const std::vector<int64_t> &w1 =
        program.buffers[inst.operands[first + 3]].shape;
    int64_t H = x.shape.back(), topK = ids.shape.back();
    int64_t group =
        recipe->group ? program.partsOf(program.groups[*recipe->group]) : 1;
    std::optional<cpu::Fp8Gemms> fp8 = fp8GemmsOf(inst);
    most = std::max(most, cpu::expertsWorkspaceBytes(x.numElements() / H, topK,
                                                     H, w1[1], backward,
                                                     fp8 && fp8->roundsGemms(),
                                                     group, cpu::numThreads()));
  }
  return most;
}

std::optional<cpu::Fp8Gemms> fp8GemmsOf(const Instruction &instruction,
                                        const StepContext *context) {
  std::optional<ops::ExpertsRecipe> recipe = ops::expertsRecipeOf(instruction);
  if (!recipe || !recipe->fp8Scaling)
    return std::nullopt;
  cpu::Fp8Gemms fp8;
  fp8.scaling = static_cast<cpu::Fp8Gemms::Scaling>(*recipe->fp8Scaling);
  fp8.block = recipe->fp8Block;
  fp8.dispatch = recipe->fp8Dispatch;
  // Delayed scaling's amax history follows w2 (verified).
  if (recipe->amaxHistory && context) {
    uint32_t b = *recipe->amaxHistory;
    fp8.history = reinterpret_cast<float *>(context->pointers[b]);
    fp8.historyLength = context->program.buffers[b].shape[2];
  }
  return fp8;
}

absl::Status runExpertParallel(const StepContext &context, size_t index) {
  const Program &program = context.program;
  const Instruction &inst = program.instructions[index];
  bool isForward = inst.opcode == Opcode::Experts;
  auto f32 = [&](uint32_t b) {
    return reinterpret_cast<float *>(context.pointers[b]);
  };
  // ExpertsGrad's operands are Experts' after dy.
  size_t first = isForward ? 0 : 1;
  const std::vector<uint32_t> &in = inst.operands;
  const Buffer &x = program.buffers[in[first]];
  const Buffer &ids = program.buffers[in[first + 2]];
  const std::vector<int64_t> &w1 = program.buffers[in[first + 3]].shape;
  std::optional<cpu::Fp8Gemms> fp8 = fp8GemmsOf(inst, &context);
  ExpertOperands ops{
      f32(in[first]),
      f32(in[first + 1]),
      reinterpret_cast<const int32_t *>(context.pointers[in[first + 2]]),
      f32(in[first + 3]),
      f32(in[first + 4]),
      f32(in[first + 5]),
      /*tokens=*/ids.numElements() / ids.shape.back(), // k >= 1 (verified)
      /*hidden=*/x.shape.back(),
      /*ffn=*/w1[1],
      /*localExperts=*/w1[0],
      /*topK=*/ids.shape.back(),
      fp8 ? &*fp8 : nullptr,
      context.trace};
  ops.bf16X = storedAsBf16(context, in[first]);
  ops.bf16Dy = !isForward && storedAsBf16(context, in[0]);
  ops.bf16Out = storedAsBf16(context, inst.results[0]);

  comm::Group &group = *context.groups[*ops::expertsRecipeOf(inst)->group];
  int64_t experts = ops.localExperts * group.size();
  absl::Status routing =
      checkExpertIds(ids, ops.indices, ops.tokens, ops.topK, experts);
  std::vector<std::pair<int64_t, int64_t>> ranges =
      expertChunkTokens(ops.tokens, context.expertChunks);
  std::vector<Chunk> chunks(ranges.size());
  const float *dy = isForward ? nullptr : f32(in[0]);
  for (size_t c = 0; c < ranges.size(); ++c) {
    auto [begin, end] = ranges[c];
    Chunk &chunk = chunks[c];
    chunk.ops = ops;
    chunk.ops.x = ops.x + begin * ops.hidden;
    chunk.ops.weights = ops.weights + begin * ops.topK;
    chunk.ops.indices = ops.indices + begin * ops.topK;
    chunk.ops.tokens = end - begin;
    chunk.dy = dy ? dy + begin * ops.hidden : nullptr;
    chunk.firstToken = begin;
  }
  ExpertGradients grads{};
  if (!isForward)
    grads = {f32(inst.results[0]), f32(inst.results[1]), f32(inst.results[2]),
             f32(inst.results[3]), f32(inst.results[4])};
  absl::Status status =
      runChunks(group, chunks, routing, !isForward, context.overlapExperts,
                isForward ? nullptr : &grads);
  if (status.ok())
    finish(chunks, !isForward, isForward ? f32(inst.results[0]) : nullptr,
           isForward ? nullptr : &grads);
  if (status.ok())
    return status;
  return absl::Status(status.code(),
                      absl::StrCat(describeInstruction(program, index), ": ",
                                   status.message()));
}

} // namespace moe::rt::engine
