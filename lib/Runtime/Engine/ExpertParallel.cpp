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
// Before any row moves, the ranks exchange headers: for each destination,
// the rows for each of its local experts and an error flag. The counts tell
// the receiver how many rows arrive and which local expert each is for
// (a source's rows arrive expert by expert), so no ids travel. The flag lets
// a rank that found a bad expert id stop the whole group in step, instead
// of leaving the others blocked in the row exchange until the deadline.
//
//===----------------------------------------------------------------------===//

#include "ExpertParallel.h"

#include "moe/Runtime/IO/Trace.h"

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
};

/// Who sends which rows to whom; the same agreement on every rank.
struct ExchangePlan {
  /// This rank's routed slots t * topK + j, in the order their rows leave
  /// (and come back).
  std::vector<int64_t> slots;
  /// Rows to and from each group rank.
  std::vector<int64_t> sendRows, recvRows;
  /// The local expert of every arriving row, in arrival order.
  std::vector<int32_t> recvExperts;
};

/// The first slot whose expert id is outside [-1, experts), or -1.
int64_t firstInvalidSlot(const ExpertOperands &ops, int64_t experts) {
  int64_t slots = ops.tokens * ops.topK;
  for (int64_t s = 0; s < slots; ++s)
    if (ops.indices[s] < -1 || ops.indices[s] >= experts)
      return s;
  return -1;
}

/// The error for a bad expert id, naming its token like Embedding does:
/// "token 3 (batch 0, seq 3), slot 1" for ids laid out as [B, S, k].
absl::Status invalidExpertId(const Buffer &ids, const ExpertOperands &ops,
                             int64_t slot, int64_t experts) {
  int64_t token = slot / ops.topK;
  std::string where = absl::StrCat("token ", token);
  if (ids.shape.size() == 3 && ids.shape[1] > 0)
    absl::StrAppend(&where, " (batch ", token / ids.shape[1], ", seq ",
                    token % ids.shape[1], ")");
  return absl::InvalidArgumentError(
      absl::StrCat("expert id ", ops.indices[slot], " at ", where, ", slot ",
                   slot % ops.topK, " is outside [-1, ", experts, ")"));
}

/// Sorts this rank's assignments and exchanges the headers. `routing` is
/// this rank's verdict on its expert ids; when it or any peer's is an
/// error, every rank returns an error after the header exchange.
absl::StatusOr<ExchangePlan> planExchange(comm::Group &group,
                                          const ExpertOperands &ops,
                                          const absl::Status &routing) {
  io::TraceScope span(ops.trace, io::TraceTrack::Communication,
                      "expert counts");
  int64_t ranks = group.size(), local = ops.localExperts;
  int64_t experts = local * ranks, width = local + 1;
  ExchangePlan plan;
  plan.sendRows.assign(ranks, 0);
  // Per destination: rows for each of its local experts, then the flag.
  std::vector<int32_t> header(ranks * width, 0);
  if (routing.ok()) {
    int64_t slots = ops.tokens * ops.topK;
    std::vector<int64_t> next(experts + 1, 0);
    for (int64_t s = 0; s < slots; ++s)
      if (ops.indices[s] >= 0)
        ++next[ops.indices[s] + 1];
    for (int64_t e = 0; e < experts; ++e) {
      // Counts are at most T * k, which the verifier keeps within int32.
      header[e / local * width + e % local] = static_cast<int32_t>(next[e + 1]);
      plan.sendRows[e / local] += next[e + 1];
      next[e + 1] += next[e];
    }
    plan.slots.resize(next[experts]);
    for (int64_t s = 0; s < slots; ++s)
      if (ops.indices[s] >= 0)
        plan.slots[next[ops.indices[s]]++] = s;
  } else {
    for (int64_t d = 0; d < ranks; ++d)
      header[d * width + local] = 1;
  }

  std::vector<int32_t> received(header.size());
  std::vector<int64_t> counts(ranks, width), offsets(ranks);
  for (int64_t d = 0; d < ranks; ++d)
    offsets[d] = d * width;
  if (absl::Status status = group.allToAll(
          header, counts, offsets, absl::MakeSpan(received), counts, offsets);
      !status.ok())
    return status;
  if (!routing.ok())
    return routing;
  for (int64_t i = 0; i < ranks; ++i)
    if (received[i * width + local] != 0)
      return absl::InvalidArgumentError(
          absl::StrCat("group rank ", i, " of ", group.name(),
                       " has an expert id outside [-1, ", experts, ")"));

  plan.recvRows.assign(ranks, 0);
  for (int64_t i = 0; i < ranks; ++i)
    for (int32_t e = 0; e < local; ++e) {
      int32_t rows = received[i * width + e];
      plan.recvRows[i] += rows;
      plan.recvExperts.insert(plan.recvExperts.end(), rows, e);
    }
  return plan;
}

/// Sends sendRows[d] rows of `width` floats of `send` (packed in group-rank
/// order) to group rank d and receives recvRows[i] rows from rank i into
/// `recv`, packed the same way.
/// `name` labels the exchange's span on the trace's communication track.
absl::Status exchangeRows(comm::Group &group, const std::vector<float> &send,
                          const std::vector<int64_t> &sendRows,
                          std::vector<float> &recv,
                          const std::vector<int64_t> &recvRows, int64_t width,
                          io::Trace *trace, const char *name) {
  io::TraceScope span(trace, io::TraceTrack::Communication, name);
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

absl::Status forward(comm::Group &group, const ExpertOperands &ops,
                     const ExchangePlan &plan, float *y) {
  int64_t H = ops.hidden, topK = ops.topK;
  std::vector<float> sent(plan.slots.size() * H);
  for (size_t r = 0; r < plan.slots.size(); ++r) {
    const float *row = ops.x + plan.slots[r] / topK * H;
    std::copy(row, row + H, sent.begin() + r * H);
  }
  std::vector<float> arrived;
  if (absl::Status status =
          exchangeRows(group, sent, plan.sendRows, arrived, plan.recvRows, H,
                       ops.trace, "expert dispatch");
      !status.ok())
    return status;

  // Each arriving row is one assignment to a local expert with weight 1
  // (exact: the output is the expert's row as is); the routing weight is
  // applied at the source, as the kernel applies it.
  int64_t rows = static_cast<int64_t>(plan.recvExperts.size());
  std::vector<float> unit(rows, 1.0f), outputs(rows * H);
  {
    io::TraceScope compute(ops.trace, io::TraceTrack::Compute, "Experts");
    cpu::expertsForward(arrived.data(), unit.data(), plan.recvExperts.data(),
                        ops.w1, ops.w3, ops.w2, outputs.data(), rows, H,
                        ops.ffn, ops.localExperts, /*topK=*/1, ops.fp8);
  }
  std::vector<float> returned;
  if (absl::Status status =
          exchangeRows(group, outputs, plan.recvRows, returned, plan.sendRows,
                       H, ops.trace, "expert combine");
      !status.ok())
    return status;

  std::fill(y, y + ops.tokens * H, 0.0f);
  for (size_t r = 0; r < plan.slots.size(); ++r) {
    int64_t slot = plan.slots[r];
    float w = ops.weights[slot];
    float *yr = y + slot / topK * H;
    const float *zr = returned.data() + r * H;
    for (int64_t i = 0; i < H; ++i)
      yr[i] += w * zr[i];
  }
  return absl::OkStatus();
}

/// The results of ExpertsGrad: dx [T, H], dweights [T, k] and the local
/// experts' dw1, dw3 [El, F, H], dw2 [El, H, F].
struct ExpertGradients {
  float *dx, *dweights, *dw1, *dw3, *dw2;
};

absl::Status backward(comm::Group &group, const ExpertOperands &ops,
                      const ExchangePlan &plan, const float *dy,
                      const ExpertGradients &grads) {
  int64_t H = ops.hidden, topK = ops.topK;
  // A row out: [x | dy | routing weight].
  int64_t out = 2 * H + 1;
  std::vector<float> sent(plan.slots.size() * out);
  for (size_t r = 0; r < plan.slots.size(); ++r) {
    int64_t slot = plan.slots[r], token = slot / topK;
    float *row = sent.data() + r * out;
    std::copy(ops.x + token * H, ops.x + (token + 1) * H, row);
    std::copy(dy + token * H, dy + (token + 1) * H, row + H);
    row[2 * H] = ops.weights[slot];
  }
  std::vector<float> arrived;
  if (absl::Status status =
          exchangeRows(group, sent, plan.sendRows, arrived, plan.recvRows, out,
                       ops.trace, "expert dispatch (backward)");
      !status.ok())
    return status;

  int64_t rows = static_cast<int64_t>(plan.recvExperts.size());
  std::vector<float> x(rows * H), dyRows(rows * H), w(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = arrived.data() + r * out;
    std::copy(row, row + H, x.begin() + r * H);
    std::copy(row + H, row + 2 * H, dyRows.begin() + r * H);
    w[r] = row[2 * H];
  }
  // The local experts' weight gradients sum over every row that arrived:
  // the group's tokens. dx rows come out scaled by their weight.
  std::vector<float> dx(rows * H), dweights(rows);
  {
    io::TraceScope compute(ops.trace, io::TraceTrack::Compute, "ExpertsGrad");
    cpu::expertsBackward(dyRows.data(), x.data(), w.data(),
                         plan.recvExperts.data(), ops.w1, ops.w3, ops.w2,
                         dx.data(), dweights.data(), grads.dw1, grads.dw3,
                         grads.dw2, rows, H, ops.ffn, ops.localExperts,
                         /*topK=*/1, ops.fp8);
  }

  // A row back: [dx | dweight].
  int64_t back = H + 1;
  std::vector<float> results(rows * back);
  for (int64_t r = 0; r < rows; ++r) {
    float *row = results.data() + r * back;
    std::copy(dx.begin() + r * H, dx.begin() + (r + 1) * H, row);
    row[H] = dweights[r];
  }
  std::vector<float> returned;
  if (absl::Status status =
          exchangeRows(group, results, plan.recvRows, returned, plan.sendRows,
                       back, ops.trace, "expert combine (backward)");
      !status.ok())
    return status;

  // Dropped slots keep dweights = 0, as in the kernel.
  std::fill(grads.dx, grads.dx + ops.tokens * H, 0.0f);
  std::fill(grads.dweights, grads.dweights + ops.tokens * topK, 0.0f);
  for (size_t r = 0; r < plan.slots.size(); ++r) {
    int64_t slot = plan.slots[r];
    const float *row = returned.data() + r * back;
    float *dxr = grads.dx + slot / topK * H;
    for (int64_t i = 0; i < H; ++i)
      dxr[i] += row[i];
    grads.dweights[slot] = row[H];
  }
  return absl::OkStatus();
}

} // namespace

bool isExpertParallel(const Instruction &instruction) {
  return (instruction.opcode == Opcode::Experts ||
          instruction.opcode == Opcode::ExpertsGrad) &&
         !instruction.intAttrs.empty();
}

uint64_t expertsWorkspaceBytes(const Program &program) {
  uint64_t most = 0;
  for (const Instruction &inst : program.instructions) {
    bool backward = inst.opcode == Opcode::ExpertsGrad;
    if (inst.opcode != Opcode::Experts && !backward)
      continue;
    size_t first = backward ? 1 : 0;
    const Buffer &x = program.buffers[inst.operands[first]];
    const Buffer &ids = program.buffers[inst.operands[first + 2]];
    const std::vector<int64_t> &w1 =
        program.buffers[inst.operands[first + 3]].shape;
    int64_t H = x.shape.back(), topK = ids.shape.back();
    int64_t group = isExpertParallel(inst)
                        ? program.partsOf(program.groups[inst.intAttrs[0]])
                        : 1;
    most = std::max(most, cpu::expertsWorkspaceBytes(
                              x.numElements() / H, topK, H, w1[1], backward,
                              inst.floatAttrs.size() == 2, group));
  }
  return most;
}

std::optional<cpu::Fp8Gemms> fp8GemmsOf(const Instruction &instruction) {
  const std::vector<float> &f = instruction.floatAttrs;
  if (f.size() != 2)
    return std::nullopt;
  cpu::Fp8Gemms fp8;
  fp8.scaling = static_cast<cpu::Fp8Gemms::Scaling>(static_cast<int>(f[0]));
  fp8.block = static_cast<int64_t>(f[1]);
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
  std::optional<cpu::Fp8Gemms> fp8 = fp8GemmsOf(inst);
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

  comm::Group &group = *context.groups[inst.intAttrs[0]];
  int64_t experts = ops.localExperts * group.size();
  int64_t bad = firstInvalidSlot(ops, experts);
  absl::Status routing =
      bad < 0 ? absl::OkStatus() : invalidExpertId(ids, ops, bad, experts);
  absl::StatusOr<ExchangePlan> plan = planExchange(group, ops, routing);
  absl::Status status = plan.status();
  if (status.ok() && isForward)
    status = forward(group, ops, *plan, f32(inst.results[0]));
  else if (status.ok())
    status = backward(group, ops, *plan, f32(in[0]),
                      {f32(inst.results[0]), f32(inst.results[1]),
                       f32(inst.results[2]), f32(inst.results[3]),
                       f32(inst.results[4])});
  if (status.ok())
    return status;
  return absl::Status(status.code(),
                      absl::StrCat(describeInstruction(program, index), ": ",
                                   status.message()));
}

} // namespace moe::rt::engine
