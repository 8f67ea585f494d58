//===- DeviceExpertParallel.cpp - experts distributed over GPUs -----------===//
//
// As the CPU's expert parallelism (ExpertExchange.h): the ranks agree over
// MPI on who sends which rows to whom, the rows travel over NCCL
// (all-to-all with the agreed counts), each rank runs its experts on the
// rows that arrived (one slot each, routing weight 1 forward), and the
// results travel back in the order the rows left, so each token adds its
// experts' outputs in global expert order, as on one rank. Backward, the
// rows take their output gradient and routing weight along, and come back
// with the input gradient and the weight's gradient; the weight gradients
// of this rank's experts sum over the group's tokens.
//
// Mixed precision: rows of a BF16 x or dy travel as BF16 (half the bytes),
// and so do the rows that come back when the result is BF16: each
// assignment's expert output (input gradient) is rounded to BF16 where it
// is computed (ExpertsArgs::bf16Rows), as on one rank, and each token adds
// its rows in fp32 before the result's one rounding. Routing weights and
// their gradients travel in fp32.
//
// FP8 dispatch (`fp8_dispatch`): the tokens, and backward their gradients,
// leave as FP8 rows with one scale per block (cpu::packFp8Row's words, so a
// GPU rank sends what a CPU rank sends) and arrive as the values on the FP8
// grid; what comes back stays in its storage format.
//
//===----------------------------------------------------------------------===//
#include "DeviceExperts.h"

#include "DeviceBuffer.h"

#include "moe/Runtime/Artifact/ExpertsRecipe.h"

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/Cuda/Kernels.h"
#include "moe/Runtime/Engine/ExpertExchange.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <numeric>

namespace moe::rt::cuda {
namespace {

/// An instruction's tokens in chunks (each token's slots in one chunk),
/// with the exchange of each agreed over the group in chunk order, and the
/// device tables over all of them: the slots in the order their rows leave
/// (chunk after chunk), each slot's row among them, and the local expert
/// of each arriving row (chunk after chunk).
struct Exchange {
  std::vector<ExpertExchangePlan> plans;
  /// Per chunk, its first row among those that leave and those that arrive.
  std::vector<int64_t> firstSent, firstArrived;
  int64_t sent = 0, arrived = 0;
  DeviceBuffer<int64_t> slots, positionOfSlot;
  DeviceBuffer<int32_t> arrivingExperts;
  int64_t chunks() const { return static_cast<int64_t>(plans.size()); }
  int64_t arrivedIn(int64_t c) const {
    return static_cast<int64_t>(plans[c].recvExperts.size());
  }
};

template <typename T>
absl::Status upload(const DeviceStep &step, const std::vector<T> &host,
                    T *device) {
  if (host.empty())
    return absl::OkStatus();
  MOE_CUDA_OK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T),
                              cudaMemcpyHostToDevice, step.stream));
  // The host vectors may go before the copy would otherwise run.
  MOE_CUDA_OK(cudaStreamSynchronize(step.stream));
  return absl::OkStatus();
}

/// The exchange of the instruction's tokens in `chunks` equal chunks (at
/// most one per token), as the CPU cuts them (engine::ExpertParallel.cpp).
absl::StatusOr<Exchange> agree(const DeviceStep &step, size_t index,
                               const ExpertsArgs &args, comm::Group &group,
                               int64_t chunks) {
  const Instruction &inst = step.program.instructions[index];
  const ExpertShapes &s = args.shapes;
  size_t first = ops::expertsRecipeOf(inst)->firstOperand;
  const Buffer &ids = step.buffer(inst.operands[first + 2]);
  std::vector<int32_t> indices(s.T * s.topK);
  MOE_CUDA_TRY(step.read(args.indices, s.T * s.topK, indices.data()));
  int64_t experts = s.E * group.size();
  absl::Status routing =
      checkExpertIds(ids, indices.data(), s.T, s.topK, experts);
  Exchange exchange;
  for (auto [begin, end] : expertChunkTokens(s.T, chunks)) {
    absl::StatusOr<ExpertExchangePlan> plan =
        planExpertExchange(group, indices.data() + begin * s.topK, end - begin,
                           s.topK, s.E, routing);
    if (!plan.ok())
      return plan.status();
    // The chunk's slots count from its first token.
    for (int64_t &slot : plan->slots)
      slot += begin * s.topK;
    exchange.plans.push_back(std::move(*plan));
  }
  ChunkedExchangeTables tables = layOutChunks(exchange.plans, s.T, s.topK);
  exchange.firstSent = std::move(tables.firstSent);
  exchange.firstArrived = std::move(tables.firstArrived);
  exchange.sent = static_cast<int64_t>(tables.slots.size());
  exchange.arrived = static_cast<int64_t>(tables.arrivingExperts.size());
  const std::vector<int64_t> &slots = tables.slots;
  const std::vector<int64_t> &positions = tables.positionOfSlot;
  const std::vector<int32_t> &arriving = tables.arrivingExperts;
  MOE_DEVICE_BUFFER(int64_t, slotsOnDevice, exchange.sent, step.stream);
  MOE_DEVICE_BUFFER(int64_t, positionOfSlot, s.T * s.topK, step.stream);
  MOE_DEVICE_BUFFER(int32_t, arrivingExperts, exchange.arrived, step.stream);
  MOE_CUDA_TRY(upload(step, slots, slotsOnDevice.get()));
  MOE_CUDA_TRY(upload(step, positions, positionOfSlot.get()));
  MOE_CUDA_TRY(upload(step, arriving, arrivingExperts.get()));
  exchange.slots = std::move(slotsOnDevice);
  exchange.positionOfSlot = std::move(positionOfSlot);
  exchange.arrivingExperts = std::move(arrivingExperts);
  return exchange;
}

/// An expert-parallel instruction's exchange, agreed over its MPI group,
/// and the NCCL communicator its rows travel over.
struct Route {
  Exchange exchange;
  NcclGroup *nccl;
};

absl::StatusOr<Route> routeOf(const DeviceStep &step, size_t index,
                              const ExpertsArgs &args) {
  const Instruction &inst = step.program.instructions[index];
  ops::ExpertsRecipe recipe = *ops::expertsRecipeOf(inst);
  comm::Group *mpi = step.mpiGroup(*recipe.group);
  NcclGroup *nccl = step.ncclGroup(*recipe.group);
  if (!mpi || !nccl || !step.comm)
    return absl::FailedPreconditionError(
        "expert parallelism needs the job's communicators");
  absl::StatusOr<Exchange> exchange =
      agree(step, index, args, *mpi, step.expertChunks);
  if (!exchange.ok())
    return exchange.status();
  return Route{std::move(*exchange), nccl};
}

/// How rows travel: fp32 as they are, BF16 (rows holding BF16 values,
/// narrowed exactly), or FP8 rows (cpu::packFp8Row's words).
struct Wire {
  enum Kind { F32, Bf16, Fp8 } kind = F32;
  int64_t block = 0;
  Fp8Format format = Fp8Format::E4M3;
};

/// One all-to-all of rows in flight: put in its wire form on the compute
/// stream, sent on the communication stream, and where the compute stream
/// needs the rows (finish), waited for and unpacked into `arrived`. The
/// wire buffers live with it.
class Transfer {
public:
  Transfer() = default;
  Transfer(const Transfer &) = delete;
  Transfer &operator=(const Transfer &) = delete;
  /// A transfer left unfinished (an error on the way) still has the
  /// compute stream wait for it: the buffers it reads and writes, its own
  /// and the caller's (declared before it), are freed on that stream.
  ~Transfer() {
    if (inFlight)
      inFlight->comm->before(inFlight->stream, key).IgnoreError();
  }

  /// `key`: a name of the transfer among the instruction's others, for the
  /// communication stream's pending work (CommStream::run).
  absl::Status start(const DeviceStep &step, NcclGroup &group,
                     const float *rows, const std::vector<int64_t> &sendRows,
                     float *arrived, const std::vector<int64_t> &recvRows,
                     int64_t width, Wire wire, size_t key) {
    inFlight = &step;
    this->arrived = arrived;
    this->wire = wire;
    this->width = width;
    this->key = key;
    auto total = [](const std::vector<int64_t> &counts) {
      return std::accumulate(counts.begin(), counts.end(), int64_t{0});
    };
    int64_t leaving = total(sendRows);
    arriving = total(recvRows);
    cudaStream_t stream = step.stream;
    std::function<absl::Status(cudaStream_t)> work;
    switch (wire.kind) {
    case Wire::F32:
      work = [&, rows](cudaStream_t on) {
        return group.allToAllRows(rows, sendRows, arrived, recvRows, width, on);
      };
      break;
    case Wire::Bf16: {
      MOE_DEVICE_BUFFER(uint16_t, out, leaving * width, stream);
      MOE_DEVICE_BUFFER(uint16_t, in, arriving * width, stream);
      MOE_CUDA_TRY(castToBf16(rows, out.get(), leaving * width, stream));
      narrowOut = std::move(out);
      narrowIn = std::move(in);
      work = [&](cudaStream_t on) {
        return group.allToAllRows(narrowOut.get(), sendRows, narrowIn.get(),
                                  recvRows, width, on);
      };
      break;
    }
    case Wire::Fp8: {
      int64_t words = cpu::packedFp8Words(width, wire.block);
      MOE_DEVICE_BUFFER(int32_t, out, leaving * words, stream);
      MOE_DEVICE_BUFFER(int32_t, in, arriving * words, stream);
      MOE_CUDA_TRY(packFp8Rows(rows, leaving, width, wire.block, wire.format,
                               out.get(), stream));
      packedOut = std::move(out);
      packedIn = std::move(in);
      work = [&, words](cudaStream_t on) {
        return group.allToAllRows(packedOut.get(), sendRows, packedIn.get(),
                                  recvRows, words, on);
      };
      break;
    }
    }
    return step.comm->run(stream, key, work);
  }

  /// The compute stream waits for the rows, then they are unpacked.
  absl::Status finish(const DeviceStep &step) {
    cudaStream_t stream = step.stream;
    inFlight = nullptr;
    MOE_CUDA_TRY(step.comm->before(stream, key));
    switch (wire.kind) {
    case Wire::F32:
      return absl::OkStatus();
    case Wire::Bf16:
      return castFromBf16(narrowIn.get(), arrived, arriving * width, stream);
    case Wire::Fp8:
      return unpackFp8Rows(packedIn.get(), arriving, width, wire.block,
                           wire.format, arrived, stream);
    }
    return absl::OkStatus();
  }

private:
  const DeviceStep *inFlight = nullptr;
  float *arrived = nullptr;
  Wire wire;
  int64_t width = 0, arriving = 0;
  size_t key = 0;
  DeviceBuffer<uint16_t> narrowOut, narrowIn;
  DeviceBuffer<int32_t> packedOut, packedIn;
};

/// How the tokens (and, backward, their gradients) of an instruction
/// travel to their experts: FP8 rows with `fp8_dispatch`, else as their
/// storage (BF16 or fp32).
struct DispatchFormat {
  bool fp8 = false;
  int64_t block = 0;
  /// The gradients' format: E5M2 under FP8 GEMMs with tensor scales, E4M3
  /// otherwise (cpu::fp8GradientFormat).
  Fp8Format gradients = Fp8Format::E4M3;

  /// The wire of rows in `format` whose storage is BF16 when `bf16`.
  Wire wireOf(bool bf16, Fp8Format format) const {
    if (fp8)
      return {Wire::Fp8, block, format};
    return {bf16 ? Wire::Bf16 : Wire::F32, 0, format};
  }
};

DispatchFormat dispatchFormatOf(const DeviceStep &step, size_t index) {
  ops::ExpertsRecipe recipe =
      *ops::expertsRecipeOf(step.program.instructions[index]);
  DispatchFormat format;
  format.fp8 = recipe.fp8Dispatch;
  format.block = recipe.fp8Block;
  if (recipe.fp8Scaling && (*recipe.fp8Scaling == Fp8Scaling::Tensorwise ||
                            *recipe.fp8Scaling == Fp8Scaling::Delayed))
    format.gradients = Fp8Format::E5M2;
  return format;
}

/// Names of an instruction's transfers on the communication stream, clear
/// of the instruction indices CommStream keys its own work by (and of
/// runNow's).
size_t transferKey(int64_t chunk, int kind) {
  return std::numeric_limits<size_t>::max() - 1 - 8 * chunk - kind;
}

/// The experts' operands for chunk c's arrived rows: one slot each, the
/// rows `x` and routing weights `weights` (arrays over every chunk's rows).
ExpertsArgs chunkArgs(const ExpertsArgs &args, const Exchange &exchange,
                      int64_t c, const float *x, const float *weights) {
  int64_t first = exchange.firstArrived[c];
  ExpertsArgs local = args;
  local.x = x + first * args.shapes.H;
  local.weights = weights + first;
  local.indices = exchange.arrivingExperts.get() + first;
  local.shapes.T = exchange.arrivedIn(c);
  local.shapes.topK = 1;
  return local;
}

/// Rows [first, first + n) of a row-major array of `width`.
template <typename T> T *rowsAt(T *base, int64_t first, int64_t width) {
  return base + first * width;
}

} // namespace

// The chunks go through the experts as a pipeline (docs/overlap.md): chunk
// c + 1's tokens travel on the communication stream while chunk c's experts
// run on the compute stream, and chunk c's results travel back while chunk
// c + 1's run. The exchanges are enqueued in the same order on every rank
// (dispatch 0, dispatch 1, combine 0, dispatch 2, combine 1, ...), as NCCL
// needs and the CPU does. One chunk is the plain exchange.
absl::Status expertParallelForward(const DeviceStep &step, size_t index,
                                   const ExpertMatmul &mm,
                                   const ExpertsArgs &args, float *y) {
  absl::StatusOr<Route> route = routeOf(step, index, args);
  if (!route.ok())
    return route.status();
  Exchange &exchange = route->exchange;
  NcclGroup &nccl = *route->nccl;
  const ExpertShapes &s = args.shapes;
  cudaStream_t stream = step.stream;
  int64_t sent = exchange.sent, arrived = exchange.arrived;
  int64_t chunks = exchange.chunks();

  MOE_DEVICE_BUFFER(float, leaving, sent * s.H, stream);
  MOE_CUDA_TRY(gatherRows(args.x, exchange.slots.get(), sent, s.topK, s.H,
                          leaving.get(), stream));
  MOE_DEVICE_BUFFER(float, arriving, arrived * s.H, stream);
  MOE_DEVICE_BUFFER(float, outputs, arrived * s.H, stream);
  MOE_DEVICE_BUFFER(float, returned, sent * s.H, stream);
  // This rank's experts on the rows that arrived: one slot each, weight 1
  // (the routing weight applies where the token is).
  MOE_DEVICE_BUFFER(float, ones, arrived, stream);
  MOE_CUDA_TRY(fill(ones.get(), 1.0f, arrived, stream));
  Wire out = dispatchFormatOf(step, index).wireOf(args.bf16X, Fp8Format::E4M3);
  Wire back{args.bf16Rows ? Wire::Bf16 : Wire::F32};
  std::vector<Transfer> dispatched(chunks), combined(chunks);
  auto dispatch = [&](int64_t c) {
    const ExpertExchangePlan &plan = exchange.plans[c];
    return dispatched[c].start(
        step, nccl, rowsAt(leaving.get(), exchange.firstSent[c], s.H),
        plan.sendRows, rowsAt(arriving.get(), exchange.firstArrived[c], s.H),
        plan.recvRows, s.H, out, transferKey(c, 0));
  };
  MOE_CUDA_TRY(dispatch(0));
  for (int64_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks)
      MOE_CUDA_TRY(dispatch(c + 1));
    MOE_CUDA_TRY(dispatched[c].finish(step));
    ExpertsArgs local =
        chunkArgs(args, exchange, c, arriving.get(), ones.get());
    float *chunkOutputs = rowsAt(outputs.get(), exchange.firstArrived[c], s.H);
    if (local.shapes.T > 0)
      MOE_CUDA_TRY(expertsForwardOn(step, mm, local, chunkOutputs));
    const ExpertExchangePlan &plan = exchange.plans[c];
    MOE_CUDA_TRY(
        combined[c].start(step, nccl, chunkOutputs, plan.recvRows,
                          rowsAt(returned.get(), exchange.firstSent[c], s.H),
                          plan.sendRows, s.H, back, transferKey(c, 1)));
  }
  for (Transfer &transfer : combined)
    MOE_CUDA_TRY(transfer.finish(step));
  return combineRows(returned.get(), exchange.positionOfSlot.get(),
                     args.indices, args.weights, s.T, s.topK, s.H, y, stream);
}

absl::Status expertParallelBackward(const DeviceStep &step, size_t index,
                                    const ExpertMatmul &mm,
                                    const ExpertsArgs &args, const float *dy,
                                    const ExpertGradients &out) {
  absl::StatusOr<Route> route = routeOf(step, index, args);
  if (!route.ok())
    return route.status();
  Exchange &exchange = route->exchange;
  NcclGroup &nccl = *route->nccl;
  const ExpertShapes &s = args.shapes;
  cudaStream_t stream = step.stream;
  int64_t sent = exchange.sent, arrived = exchange.arrived;
  int64_t chunks = exchange.chunks();
  const int64_t *slots = exchange.slots.get();

  // The rows leave with their output gradient and routing weight.
  MOE_DEVICE_BUFFER(float, leavingX, sent * s.H, stream);
  MOE_DEVICE_BUFFER(float, leavingDy, sent * s.H, stream);
  MOE_DEVICE_BUFFER(float, leavingWeights, sent, stream);
  MOE_CUDA_TRY(gatherRows(args.x, slots, sent, s.topK, s.H, leavingX.get(),
                          stream));
  MOE_CUDA_TRY(gatherRows(dy, slots, sent, s.topK, s.H, leavingDy.get(),
                          stream));
  MOE_CUDA_TRY(gatherRows(args.weights, slots, sent, 1, 1,
                          leavingWeights.get(), stream));
  MOE_DEVICE_BUFFER(float, arrivingX, arrived * s.H, stream);
  MOE_DEVICE_BUFFER(float, arrivingDy, arrived * s.H, stream);
  MOE_DEVICE_BUFFER(float, arrivingWeights, arrived, stream);
  MOE_DEVICE_BUFFER(float, dxRows, arrived * s.H, stream);
  MOE_DEVICE_BUFFER(float, dweightRows, arrived, stream);
  MOE_DEVICE_BUFFER(float, returnedDx, sent * s.H, stream);
  MOE_DEVICE_BUFFER(float, returnedDweights, sent, stream);
  DispatchFormat format = dispatchFormatOf(step, index);
  Wire xWire = format.wireOf(args.bf16X, Fp8Format::E4M3);
  Wire dyWire = format.wireOf(args.bf16Dy, format.gradients);
  Wire dxWire{args.bf16Rows ? Wire::Bf16 : Wire::F32};
  // Per chunk: x, dy and the routing weights out; dx and the weights'
  // gradients back.
  std::vector<std::array<Transfer, 3>> dispatched(chunks);
  std::vector<std::array<Transfer, 2>> combined(chunks);
  auto dispatch = [&](int64_t c) -> absl::Status {
    const ExpertExchangePlan &plan = exchange.plans[c];
    int64_t from = exchange.firstSent[c], to = exchange.firstArrived[c];
    MOE_CUDA_TRY(
        dispatched[c][0].start(step, nccl, rowsAt(leavingX.get(), from, s.H),
                               plan.sendRows, rowsAt(arrivingX.get(), to, s.H),
                               plan.recvRows, s.H, xWire, transferKey(c, 0)));
    MOE_CUDA_TRY(
        dispatched[c][1].start(step, nccl, rowsAt(leavingDy.get(), from, s.H),
                               plan.sendRows, rowsAt(arrivingDy.get(), to, s.H),
                               plan.recvRows, s.H, dyWire, transferKey(c, 1)));
    return dispatched[c][2].start(step, nccl, leavingWeights.get() + from,
                                  plan.sendRows, arrivingWeights.get() + to,
                                  plan.recvRows, 1, Wire{}, transferKey(c, 2));
  };
  MOE_CUDA_TRY(dispatch(0));
  for (int64_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks)
      MOE_CUDA_TRY(dispatch(c + 1));
    for (Transfer &transfer : dispatched[c])
      MOE_CUDA_TRY(transfer.finish(step));
    // This rank's experts on the arrived rows; their weight gradients are
    // the instruction's, each chunk's added in chunk order.
    int64_t first = exchange.firstArrived[c];
    ExpertsArgs local =
        chunkArgs(args, exchange, c, arrivingX.get(), arrivingWeights.get());
    ExpertGradients localOut{rowsAt(dxRows.get(), first, s.H),
                             dweightRows.get() + first,
                             out.dw1,
                             out.dw3,
                             out.dw2,
                             /*accumulate=*/c > 0};
    if (local.shapes.T > 0 || c == 0)
      MOE_CUDA_TRY(expertsBackwardOn(
          step, mm, local, rowsAt(arrivingDy.get(), first, s.H), localOut));
    const ExpertExchangePlan &plan = exchange.plans[c];
    int64_t to = exchange.firstSent[c];
    MOE_CUDA_TRY(combined[c][0].start(step, nccl, localOut.dx, plan.recvRows,
                                      rowsAt(returnedDx.get(), to, s.H),
                                      plan.sendRows, s.H, dxWire,
                                      transferKey(c, 3)));
    MOE_CUDA_TRY(
        combined[c][1].start(step, nccl, localOut.dweights, plan.recvRows,
                             returnedDweights.get() + to, plan.sendRows, 1,
                             Wire{}, transferKey(c, 4)));
  }
  for (std::array<Transfer, 2> &back : combined)
    for (Transfer &transfer : back)
      MOE_CUDA_TRY(transfer.finish(step));

  // Back where the tokens are: dx adds in expert order (unweighted), each
  // slot's weight gradient lands on it (dropped slots keep 0).
  MOE_DEVICE_BUFFER(float, ones, s.T * s.topK, stream);
  MOE_CUDA_TRY(fill(ones.get(), 1.0f, s.T * s.topK, stream));
  MOE_CUDA_TRY(combineRows(returnedDx.get(), exchange.positionOfSlot.get(),
                           args.indices, ones.get(), s.T, s.topK, s.H, out.dx,
                           stream));
  MOE_CUDA_TRY(fill(out.dweights, 0.0f, s.T * s.topK, stream));
  return scatterValues(returnedDweights.get(), slots, sent, out.dweights,
                       stream);
}

} // namespace moe::rt::cuda
