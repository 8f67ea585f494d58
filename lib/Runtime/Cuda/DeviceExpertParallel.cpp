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

#include <numeric>

namespace moe::rt::cuda {
namespace {

/// The exchange agreed for one instruction, with its device tables.
struct Exchange {
  ExpertExchangePlan plan;
  /// The slots in the order their rows leave; each slot's row (-1: none).
  DeviceBuffer<int64_t> slots, positionOfSlot;
  /// The local expert of each arriving row.
  DeviceBuffer<int32_t> arrivingExperts;
  int64_t sent() const { return static_cast<int64_t>(plan.slots.size()); }
  int64_t arrived() const {
    return static_cast<int64_t>(plan.recvExperts.size());
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

absl::StatusOr<Exchange> agree(const DeviceStep &step, size_t index,
                               const ExpertsArgs &args, comm::Group &group) {
  const Instruction &inst = step.program.instructions[index];
  const ExpertShapes &s = args.shapes;
  size_t first = ops::expertsRecipeOf(inst)->firstOperand;
  const Buffer &ids = step.buffer(inst.operands[first + 2]);
  std::vector<int32_t> indices(s.T * s.topK);
  MOE_CUDA_TRY(step.read(args.indices, s.T * s.topK, indices.data()));
  int64_t experts = s.E * group.size();
  absl::Status routing =
      checkExpertIds(ids, indices.data(), s.T, s.topK, experts);
  absl::StatusOr<ExpertExchangePlan> plan = planExpertExchange(
      group, indices.data(), s.T, s.topK, s.E, routing);
  if (!plan.ok())
    return plan.status();
  Exchange exchange;
  exchange.plan = std::move(*plan);
  std::vector<int64_t> positions(s.T * s.topK, -1);
  for (size_t r = 0; r < exchange.plan.slots.size(); ++r)
    positions[exchange.plan.slots[r]] = static_cast<int64_t>(r);
  MOE_DEVICE_BUFFER(int64_t, slots, exchange.sent(), step.stream);
  MOE_DEVICE_BUFFER(int64_t, positionOfSlot, s.T * s.topK, step.stream);
  MOE_DEVICE_BUFFER(int32_t, arriving, exchange.arrived(), step.stream);
  MOE_CUDA_TRY(upload(step, exchange.plan.slots, slots.get()));
  MOE_CUDA_TRY(upload(step, positions, positionOfSlot.get()));
  MOE_CUDA_TRY(upload(step, exchange.plan.recvExperts, arriving.get()));
  exchange.slots = std::move(slots);
  exchange.positionOfSlot = std::move(positionOfSlot);
  exchange.arrivingExperts = std::move(arriving);
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
  absl::StatusOr<Exchange> exchange = agree(step, index, args, *mpi);
  if (!exchange.ok())
    return exchange.status();
  return Route{std::move(*exchange), nccl};
}

/// Rows of `width` to the ranks the plan says, and the rows that arrive,
/// on the communication stream; the compute stream goes on with them.
absl::Status send(const DeviceStep &step, NcclGroup &group,
                  const float *rows, const std::vector<int64_t> &sendRows,
                  float *arrived, const std::vector<int64_t> &recvRows,
                  int64_t width) {
  return step.comm->runNow(step.stream, [&](cudaStream_t on) {
    return group.allToAllRows(rows, sendRows, arrived, recvRows, width, on);
  });
}

/// send() of rows holding BF16 values (widened): narrowed (exactly) for the
/// wire, widened again on arrival, when `asBf16`.
absl::Status sendRows(const DeviceStep &step, NcclGroup &group,
                      const float *rows, const std::vector<int64_t> &sendRows,
                      float *arrived, const std::vector<int64_t> &recvRows,
                      int64_t width, bool asBf16) {
  if (!asBf16)
    return send(step, group, rows, sendRows, arrived, recvRows, width);
  auto total = [](const std::vector<int64_t> &counts) {
    int64_t sum = 0;
    for (int64_t each : counts)
      sum += each;
    return sum;
  };
  int64_t leaving = total(sendRows) * width, arriving = total(recvRows) * width;
  cudaStream_t stream = step.stream;
  MOE_DEVICE_BUFFER(uint16_t, narrow, leaving, stream);
  MOE_DEVICE_BUFFER(uint16_t, received, arriving, stream);
  MOE_CUDA_TRY(castToBf16(rows, narrow.get(), leaving, stream));
  MOE_CUDA_TRY(step.comm->runNow(stream, [&](cudaStream_t on) {
    return group.allToAllRows(narrow.get(), sendRows, received.get(),
                              recvRows, width, on);
  }));
  return castFromBf16(received.get(), arrived, arriving, stream);
}

/// How the tokens (and, backward, their gradients) of an instruction
/// travel to their experts: FP8 rows with `fp8_dispatch`, else as their
/// storage (BF16 or fp32).
struct DispatchFormat {
  bool fp8 = false;
  int64_t block = 0;
  /// The gradients' format: E5M2 under FP8 GEMMs with tensor scales, E4M3
  /// otherwise (cpu::fp8GradientFormat).
  Fp8Format gradients = Fp8Format::E4M3;
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

/// sendRows() of token rows on their way to the experts: as FP8 rows
/// (codes and block scales, cpu::packFp8Row's words) with fp8 dispatch,
/// unpacked on arrival into the values on the FP8 grid, as on the CPU.
absl::Status dispatchRows(const DeviceStep &step, NcclGroup &group,
                          const float *rows,
                          const std::vector<int64_t> &sendRows, float *arrived,
                          const std::vector<int64_t> &recvRows, int64_t width,
                          bool asBf16, const DispatchFormat &dispatch,
                          Fp8Format format) {
  if (!dispatch.fp8)
    return cuda::sendRows(step, group, rows, sendRows, arrived, recvRows, width,
                          asBf16);
  auto total = [](const std::vector<int64_t> &counts) {
    return std::accumulate(counts.begin(), counts.end(), int64_t{0});
  };
  int64_t leaving = total(sendRows), arriving = total(recvRows);
  int64_t words = cpu::packedFp8Words(width, dispatch.block);
  cudaStream_t stream = step.stream;
  MOE_DEVICE_BUFFER(int32_t, packed, leaving * words, stream);
  MOE_DEVICE_BUFFER(int32_t, received, arriving * words, stream);
  MOE_CUDA_TRY(packFp8Rows(rows, leaving, width, dispatch.block, format,
                           packed.get(), stream));
  MOE_CUDA_TRY(step.comm->runNow(stream, [&](cudaStream_t on) {
    return group.allToAllRows(packed.get(), sendRows, received.get(), recvRows,
                              words, on);
  }));
  return unpackFp8Rows(received.get(), arriving, width, dispatch.block, format,
                       arrived, stream);
}

} // namespace

absl::Status expertParallelForward(const DeviceStep &step, size_t index,
                                   const ExpertMatmul &mm,
                                   const ExpertsArgs &args, float *y) {
  absl::StatusOr<Route> route = routeOf(step, index, args);
  if (!route.ok())
    return route.status();
  Exchange *exchange = &route->exchange;
  NcclGroup *nccl = route->nccl;
  const ExpertShapes &s = args.shapes;
  cudaStream_t stream = step.stream;
  const ExpertExchangePlan &plan = exchange->plan;
  int64_t sent = exchange->sent(), arrived = exchange->arrived();

  MOE_DEVICE_BUFFER(float, leaving, sent * s.H, stream);
  MOE_CUDA_TRY(gatherRows(args.x, exchange->slots.get(), sent, s.topK, s.H,
                          leaving.get(), stream));
  MOE_DEVICE_BUFFER(float, arriving, arrived * s.H, stream);
  DispatchFormat dispatch = dispatchFormatOf(step, index);
  MOE_CUDA_TRY(dispatchRows(step, *nccl, leaving.get(), plan.sendRows,
                            arriving.get(), plan.recvRows, s.H, args.bf16X,
                            dispatch, Fp8Format::E4M3));
  // This rank's experts on the rows that arrived: one slot each, weight 1
  // (the routing weight applies where the token is).
  MOE_DEVICE_BUFFER(float, ones, arrived, stream);
  MOE_CUDA_TRY(fill(ones.get(), 1.0f, arrived, stream));
  MOE_DEVICE_BUFFER(float, outputs, arrived * s.H, stream);
  ExpertsArgs local = args;
  local.x = arriving.get();
  local.weights = ones.get();
  local.indices = exchange->arrivingExperts.get();
  local.shapes.T = arrived;
  local.shapes.topK = 1;
  MOE_CUDA_TRY(expertsForwardOn(step, mm, local, outputs.get()));
  MOE_DEVICE_BUFFER(float, returned, sent * s.H, stream);
  MOE_CUDA_TRY(sendRows(step, *nccl, outputs.get(), plan.recvRows,
                        returned.get(), plan.sendRows, s.H, args.bf16Rows));
  return combineRows(returned.get(), exchange->positionOfSlot.get(),
                     args.indices, args.weights, s.T, s.topK, s.H, y, stream);
}

absl::Status expertParallelBackward(const DeviceStep &step, size_t index,
                                    const ExpertMatmul &mm,
                                    const ExpertsArgs &args, const float *dy,
                                    const ExpertGradients &out) {
  absl::StatusOr<Route> route = routeOf(step, index, args);
  if (!route.ok())
    return route.status();
  Exchange *exchange = &route->exchange;
  NcclGroup *nccl = route->nccl;
  const ExpertShapes &s = args.shapes;
  cudaStream_t stream = step.stream;
  const ExpertExchangePlan &plan = exchange->plan;
  int64_t sent = exchange->sent(), arrived = exchange->arrived();
  const int64_t *slots = exchange->slots.get();

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
  DispatchFormat dispatch = dispatchFormatOf(step, index);
  MOE_CUDA_TRY(dispatchRows(step, *nccl, leavingX.get(), plan.sendRows,
                            arrivingX.get(), plan.recvRows, s.H, args.bf16X,
                            dispatch, Fp8Format::E4M3));
  MOE_CUDA_TRY(dispatchRows(step, *nccl, leavingDy.get(), plan.sendRows,
                            arrivingDy.get(), plan.recvRows, s.H, args.bf16Dy,
                            dispatch, dispatch.gradients));
  MOE_CUDA_TRY(send(step, *nccl, leavingWeights.get(), plan.sendRows,
                    arrivingWeights.get(), plan.recvRows, 1));

  // This rank's experts on the arrived rows; their weight gradients are
  // the instruction's.
  MOE_DEVICE_BUFFER(float, dxRows, arrived * s.H, stream);
  MOE_DEVICE_BUFFER(float, dweightRows, arrived, stream);
  ExpertsArgs local = args;
  local.x = arrivingX.get();
  local.weights = arrivingWeights.get();
  local.indices = exchange->arrivingExperts.get();
  local.shapes.T = arrived;
  local.shapes.topK = 1;
  ExpertGradients localOut{dxRows.get(), dweightRows.get(), out.dw1, out.dw3,
                           out.dw2};
  MOE_CUDA_TRY(
      expertsBackwardOn(step, mm, local, arrivingDy.get(), localOut));

  // Back where the tokens are: dx adds in expert order (unweighted), each
  // slot's weight gradient lands on it (dropped slots keep 0).
  MOE_DEVICE_BUFFER(float, returnedDx, sent * s.H, stream);
  MOE_DEVICE_BUFFER(float, returnedDweights, sent, stream);
  MOE_CUDA_TRY(sendRows(step, *nccl, dxRows.get(), plan.recvRows,
                        returnedDx.get(), plan.sendRows, s.H, args.bf16Rows));
  MOE_CUDA_TRY(send(step, *nccl, dweightRows.get(), plan.recvRows,
                    returnedDweights.get(), plan.sendRows, 1));
  MOE_DEVICE_BUFFER(float, ones, s.T * s.topK, stream);
  MOE_CUDA_TRY(fill(ones.get(), 1.0f, s.T * s.topK, stream));
  MOE_CUDA_TRY(combineRows(returnedDx.get(), exchange->positionOfSlot.get(),
                           args.indices, ones.get(), s.T, s.topK, s.H, out.dx,
                           stream));
  MOE_CUDA_TRY(fill(out.dweights, 0.0f, s.T * s.topK, stream));
  return scatterValues(returnedDweights.get(), slots, sent, out.dweights,
                       stream);
}

} // namespace moe::rt::cuda
