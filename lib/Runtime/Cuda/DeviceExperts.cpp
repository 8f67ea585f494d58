//===- DeviceExperts.cpp - SwiGLU experts on one GPU ----------------------===//
//
// As the CPU kernel (lib/Runtime/Cpu/Experts.cpp): the routed slots are
// grouped by expert (a stable sort), their tokens gathered into one array
// in expert order, and each expert runs its GEMMs on its rows of it (BF16 or,
// with the artifact's FP8 recipe, FP8 inputs; fp32 out: ExpertMatmul).
// BF16 expert weights (mixed precision without FP8 GEMMs) are read as they
// are, not widened, and so, on one rank, are BF16 x and dy: their rows are
// gathered as stored, and the result is written in BF16 by the combine
// (readsBf16Operand). A stacked fp32 array that several GEMMs read is cast
// to BF16 once (StackedRows). The
// outputs are added back into each token in expert order, as the CPU adds
// them. The group offsets come back to the host: the GEMMs' sizes are
// theirs.
//
// The backward reads W1 x and W3 x from the forward's saved rows when the
// instruction keeps them (ExpertsWithHidden), else recomputes them with the
// same GEMMs, as the CPU does, and gets the
// routing weights' gradients as a . (W2^T dy). Under mixed precision each
// assignment's output (input gradient) is rounded to BF16 before the
// tokens add them (ExpertsArgs::bf16Rows), as the CPU rounds them.
//
//===----------------------------------------------------------------------===//
#include "DeviceStep.h"

#include "DeviceBuffer.h"

#include "moe/Runtime/Artifact/ExpertsRecipe.h"
#include "ExpertMatmul.h"
#include "DeviceExperts.h"

#include "moe/Runtime/Cuda/Kernels.h"

#include "absl/strings/str_cat.h"

#include <vector>

namespace moe::rt::cuda {
namespace {

using Role = cpu::Fp8ExpertRole;

/// The slots of a step grouped by expert, on the device, with the group
/// offsets on the host too.
struct Groups {
  DeviceBuffer<int64_t> offsets, slots, positionOfSlot;
  std::vector<int64_t> hostOffsets;
  int64_t rows() const { return hostOffsets.back(); }

  /// Calls fn(e, begin, n) for each expert e with n > 0 rows, which start
  /// at row `begin` of the stacked arrays; stops at the first error.
  template <typename Fn> absl::Status forEachExpert(Fn fn) const {
    for (size_t e = 0; e + 1 < hostOffsets.size(); ++e) {
      int64_t begin = hostOffsets[e], n = hostOffsets[e + 1] - begin;
      if (n > 0)
        MOE_CUDA_TRY(fn(static_cast<int64_t>(e), begin, n));
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<Groups> groupSlots(const DeviceStep &step,
                                  const int32_t *indices, int64_t T, int64_t E,
                                  int64_t topK) {
  Groups groups;
  int64_t numSlots = T * topK;
  MOE_DEVICE_BUFFER(int64_t, offsets, E + 1, step.stream);
  MOE_DEVICE_BUFFER(int64_t, slots, numSlots, step.stream);
  MOE_DEVICE_BUFFER(int64_t, positions, numSlots, step.stream);
  MOE_CUDA_TRY(groupByExpert(indices, T, E, topK, offsets.get(), slots.get(),
                             step.stream));
  MOE_CUDA_TRY(invertSlots(slots.get(), offsets.get(), E, numSlots,
                           positions.get(), step.stream));
  groups.hostOffsets.resize(E + 1);
  MOE_CUDA_TRY(step.read(offsets.get(), E + 1, groups.hostOffsets.data()));
  groups.offsets = std::move(offsets);
  groups.slots = std::move(slots);
  groups.positionOfSlot = std::move(positions);
  return groups;
}

/// Expert e's slice of an [E, rows, cols] weight, fp32 or BF16 (null
/// stays null).
template <typename T>
const T *expertSlice(const T *w, int64_t e, int64_t size) {
  return w ? w + e * size : nullptr;
}

/// The expert weights of an instruction: w1, w3 [E, F, H], w2 [E, H, F],
/// with their BF16 values where the GEMMs read those.
struct ExpertWeights {
  const ExpertsArgs &args;
  const ExpertShapes &s;
  ExpertOperand upGate(int64_t e, bool gate) const {
    int64_t size = s.F * s.H;
    ExpertOperand w{expertSlice(gate ? args.w3 : args.w1, e, size), s.F, s.H,
                    gate ? Role::W3 : Role::W1};
    w.bf16 = expertSlice(gate ? args.w3Bf16 : args.w1Bf16, e, size);
    return w;
  }
  ExpertOperand down(int64_t e) const {
    ExpertOperand w{expertSlice(args.w2, e, s.H * s.F), s.H, s.F, Role::W2};
    w.bf16 = expertSlice(args.w2Bf16, e, s.H * s.F);
    return w;
  }
};

/// A stacked fp32 array [rows, cols] that several BF16 GEMMs read, with
/// its BF16 copy cast once for all of them (none with FP8 GEMMs, which
/// quantize the fp32 values themselves).
struct StackedRows {
  const float *data;
  int64_t cols;
  DeviceBuffer<uint16_t> bf16;

  /// Expert rows [begin, begin + n) as a GEMM operand.
  ExpertOperand rows(int64_t begin, int64_t n, Role role,
                     Fp8Format format = Fp8Format::E4M3) const {
    ExpertOperand op{data + begin * cols, n, cols, role, format};
    if (bf16.get())
      op.bf16 = bf16.get() + begin * cols;
    return op;
  }
};

absl::StatusOr<StackedRows> stackedRows(const DeviceStep &step,
                                        const ExpertMatmul &mm,
                                        const float *data, int64_t rows,
                                        int64_t cols) {
  StackedRows stacked{data, cols, {}};
  if (mm.usesFp8())
    return stacked;
  absl::StatusOr<const uint16_t *> copied =
      step.castToBf16Scratch(data, rows * cols, stacked.bf16);
  if (!copied.ok())
    return copied.status();
  return stacked;
}

#define MOE_STACKED_ROWS(name, ...)                                            \
  auto name##_made = stackedRows(__VA_ARGS__);                                 \
  if (!name##_made.ok())                                                       \
    return name##_made.status();                                               \
  StackedRows name = std::move(*name##_made)

/// The stacked rows x[slot / topK] of every routed slot: from BF16 storage
/// (args.xBf16) BF16 rows gathered as they are, which the GEMMs read; else
/// fp32 rows into `fp32Rows` (and their BF16 copy, cast once, for BF16
/// GEMMs).
absl::StatusOr<StackedRows> tokenRows(const DeviceStep &step,
                                      const ExpertMatmul &mm,
                                      const ExpertsArgs &args,
                                      const int64_t *slots, int64_t rows,
                                      DeviceBuffer<float> &fp32Rows) {
  const ExpertShapes &s = args.shapes;
  if (args.xBf16) {
    StackedRows stacked{nullptr, s.H, {}};
    MOE_DEVICE_BUFFER(uint16_t, bits, rows * s.H, step.stream);
    MOE_CUDA_TRY(gatherRows(args.xBf16, slots, rows, s.topK, s.H, bits.get(),
                            step.stream));
    stacked.bf16 = std::move(bits);
    return stacked;
  }
  MOE_DEVICE_BUFFER(float, xs, rows *s.H, step.stream);
  MOE_CUDA_TRY(
      gatherRows(args.x, slots, rows, s.topK, s.H, xs.get(), step.stream));
  fp32Rows = std::move(xs);
  return stackedRows(step, mm, fp32Rows.get(), rows, s.H);
}

/// Zeroes an instruction's result of T x H, fp32 or BF16 (bits).
absl::Status zeroResult(float *fp32, uint16_t *bf16, int64_t n,
                        cudaStream_t stream) {
  if (bf16)
    return cudaStatus(cudaMemsetAsync(bf16, 0, n * sizeof(uint16_t), stream),
                      "cudaMemsetAsync");
  return fill(fp32, 0.0f, n, stream);
}

/// u = x W1^T and g = x W3^T for every expert's rows of the stacked xs.
absl::Status upProjections(const Groups &groups, const ExpertMatmul &mm,
                           const ExpertShapes &s, const ExpertWeights &w,
                           const StackedRows &xs, float *u, float *g) {
  return groups.forEachExpert([&](int64_t e, int64_t begin, int64_t n) {
    ExpertOperand x = xs.rows(begin, n, Role::Input);
    MOE_CUDA_TRY(mm.xwT(e, x, w.upGate(e, false), 0.0f, u + begin * s.F));
    return mm.xwT(e, x, w.upGate(e, true), 0.0f, g + begin * s.F);
  });
}

} // namespace

absl::Status expertsForwardOn(const DeviceStep &step, const ExpertMatmul &mm,
                              const ExpertsArgs &args, float *y) {
  const ExpertShapes &s = args.shapes;
  cudaStream_t stream = step.stream;
  ExpertWeights w{args, s};
  absl::StatusOr<Groups> groups =
      groupSlots(step, args.indices, s.T, s.E, s.topK);
  if (!groups.ok())
    return groups.status();
  int64_t rows = groups->rows();
  MOE_DEVICE_BUFFER(float, u, rows * s.F, stream);
  MOE_DEVICE_BUFFER(float, g, rows * s.F, stream);
  if (rows > 0) {
    DeviceBuffer<float> xs;
    absl::StatusOr<StackedRows> xRows =
        tokenRows(step, mm, args, groups->slots.get(), rows, xs);
    if (!xRows.ok())
      return xRows.status();
    MOE_CUDA_TRY(upProjections(*groups, mm, s, w, *xRows, u.get(), g.get()));
  }
  // Before swigluForward writes a over u; dropped slots get zeros.
  if (args.hiddenOut)
    MOE_CUDA_TRY(saveHidden(u.get(), g.get(), groups->positionOfSlot.get(),
                            s.T * s.topK, s.F, args.hiddenOut, stream));
  if (rows == 0)
    return zeroResult(y, args.yBf16, s.T * s.H, stream);
  // a = silu(u) * g: in place of u for FP8 GEMMs (which quantize its fp32
  // values); for BF16 GEMMs, straight into the BF16 rows they read.
  StackedRows aRows{u.get(), s.F, {}};
  if (mm.usesFp8()) {
    MOE_CUDA_TRY(swigluForward(u.get(), g.get(), u.get(), rows * s.F, stream));
  } else {
    MOE_DEVICE_BUFFER(uint16_t, aBits, rows * s.F, stream);
    MOE_CUDA_TRY(
        swigluForward(u.get(), g.get(), aBits.get(), rows * s.F, stream));
    aRows = StackedRows{nullptr, s.F, std::move(aBits)};
  }
  MOE_DEVICE_BUFFER(float, z, rows * s.H, stream);
  MOE_CUDA_TRY(groups->forEachExpert([&](int64_t e, int64_t begin, int64_t n) {
    ExpertOperand a = aRows.rows(begin, n, Role::Activation);
    return mm.xwT(e, a, w.down(e), 0.0f, z.get() + begin * s.H);
  }));
  if (args.bf16Rows)
    MOE_CUDA_TRY(roundToBf16(z.get(), rows * s.H, stream));
  if (args.yBf16)
    return combineRows(z.get(), groups->positionOfSlot.get(), args.indices,
                       args.weights, s.T, s.topK, s.H, args.yBf16, stream);
  return combineRows(z.get(), groups->positionOfSlot.get(), args.indices,
                     args.weights, s.T, s.topK, s.H, y, stream);
}

absl::Status expertsBackwardOn(const DeviceStep &step, const ExpertMatmul &mm,
                               const ExpertsArgs &args, const float *dy,
                               const ExpertGradients &out) {
  const ExpertShapes &s = args.shapes;
  cudaStream_t stream = step.stream;
  // Gradients in E5M2 (tensorwise and delayed), E4M3 (blockwise).
  Fp8Format gradient = mm.gradientFormat();
  ExpertWeights w{args, s};
  float *dx = out.dx, *dweights = out.dweights;
  float *dw1 = out.dw1, *dw3 = out.dw3, *dw2 = out.dw2;
  // Experts no token reached, and dropped slots, get zero gradients (or
  // keep what earlier chunks added).
  MOE_CUDA_TRY(fill(dweights, 0.0f, s.T * s.topK, stream));
  if (!out.accumulate) {
    MOE_CUDA_TRY(fill(dw1, 0.0f, s.E * s.F * s.H, stream));
    MOE_CUDA_TRY(fill(dw3, 0.0f, s.E * s.F * s.H, stream));
    MOE_CUDA_TRY(fill(dw2, 0.0f, s.E * s.H * s.F, stream));
  }
  // Chunks add their weight gradients in chunk order (GEMMs with beta 1).
  float beta = out.accumulate ? 1.0f : 0.0f;
  const int32_t *indices = args.indices;
  absl::StatusOr<Groups> groups = groupSlots(step, indices, s.T, s.E, s.topK);
  if (!groups.ok())
    return groups.status();
  int64_t rows = groups->rows();
  if (rows == 0)
    return zeroResult(dx, out.dxBf16, s.T * s.H, stream);

  const int64_t *slots = groups->slots.get();
  MOE_DEVICE_BUFFER(float, dys, rows * s.H, stream);
  MOE_DEVICE_BUFFER(float, rowWeights, rows, stream);
  DeviceBuffer<float> xs;
  absl::StatusOr<StackedRows> tokens =
      tokenRows(step, mm, args, slots, rows, xs);
  if (!tokens.ok())
    return tokens.status();
  const StackedRows &xRows = *tokens;
  // dy's rows in fp32 (widened exactly from BF16 storage): the routing
  // weights scale them.
  if (args.dyBf16)
    MOE_CUDA_TRY(
        gatherRows(args.dyBf16, slots, rows, s.topK, s.H, dys.get(), stream));
  else
    MOE_CUDA_TRY(gatherRows(dy, slots, rows, s.topK, s.H, dys.get(), stream));
  // The weights [T, topK] are indexed by slot: a gather with topK 1.
  MOE_CUDA_TRY(gatherRows(args.weights, slots, rows, 1, 1, rowWeights.get(),
                          stream));
  MOE_DEVICE_BUFFER(float, u, rows * s.F, stream);
  MOE_DEVICE_BUFFER(float, g, rows * s.F, stream);
  MOE_DEVICE_BUFFER(float, a, rows * s.F, stream);
  if (args.hiddenIn)
    MOE_CUDA_TRY(
        loadHidden(args.hiddenIn, slots, rows, s.F, u.get(), g.get(), stream));
  else
    MOE_CUDA_TRY(upProjections(*groups, mm, s, w, xRows, u.get(), g.get()));
  MOE_CUDA_TRY(swigluForward(u.get(), g.get(), a.get(), rows * s.F, stream));

  // da' = dy W2 (unweighted); dweights = a . da'; da = w da'.
  MOE_DEVICE_BUFFER(float, da, rows * s.F, stream);
  MOE_CUDA_TRY(groups->forEachExpert([&](int64_t e, int64_t begin, int64_t n) {
    ExpertOperand dy{dys.get() + begin * s.H, n, s.H, Role::OutputGrad,
                     gradient};
    return mm.xw(e, dy, w.down(e), 0.0f, da.get() + begin * s.F);
  }));
  // The routing weights' gradients read a as the GEMMs did: on the FP8
  // grid with FP8 experts (the CPU rounds a in place).
  MOE_DEVICE_BUFFER(float, aRead, mm.usesFp8() ? rows * s.F : 1, stream);
  const float *aDots = a.get();
  if (mm.usesFp8()) {
    MOE_CUDA_TRY(groups->forEachExpert([&](int64_t e, int64_t begin, int64_t n) {
      ExpertOperand activation{a.get() + begin * s.F, n, s.F, Role::Activation};
      return mm.rounded(e, activation, aRead.get() + begin * s.F);
    }));
    aDots = aRead.get();
  }
  MOE_DEVICE_BUFFER(float, dots, rows, stream);
  MOE_CUDA_TRY(rowDots(aDots, da.get(), rows, s.F, dots.get(), stream));
  MOE_CUDA_TRY(scatterValues(dots.get(), slots, rows, dweights, stream));
  MOE_CUDA_TRY(scaleRows(da.get(), rowWeights.get(), rows, s.F, stream));
  // dW2 reads w dy.
  MOE_CUDA_TRY(scaleRows(dys.get(), rowWeights.get(), rows, s.H, stream));
  // du = da g silu'(u), dg = da silu(u), over u and g.
  MOE_CUDA_TRY(swigluBackward(da.get(), u.get(), g.get(), u.get(), g.get(),
                              rows * s.F, stream));
  // du and dg are read twice each (dx, and dW1 or dW3): cast once.
  MOE_STACKED_ROWS(duRows, step, mm, u.get(), rows, s.F);
  MOE_STACKED_ROWS(dgRows, step, mm, g.get(), rows, s.F);
  MOE_DEVICE_BUFFER(float, dxs, rows * s.H, stream);
  MOE_CUDA_TRY(groups->forEachExpert([&](int64_t e, int64_t begin, int64_t n) {
    ExpertOperand weightedDy{dys.get() + begin * s.H, n, s.H,
                             Role::WeightedOutputGrad, gradient};
    ExpertOperand activation{a.get() + begin * s.F, n, s.F, Role::Activation};
    ExpertOperand du = duRows.rows(begin, n, Role::UpGrad, gradient);
    ExpertOperand dg = dgRows.rows(begin, n, Role::GateGrad, gradient);
    ExpertOperand xe = xRows.rows(begin, n, Role::Input);
    // dW2 = (w dy)^T a; dx_e = du W1 + dg W3; dW1 = du^T x; dW3 = dg^T x.
    MOE_CUDA_TRY(mm.gTx(e, weightedDy, activation, beta, dw2 + e * s.H * s.F));
    float *dxe = dxs.get() + begin * s.H;
    MOE_CUDA_TRY(mm.xw(e, du, w.upGate(e, false), 0.0f, dxe));
    MOE_CUDA_TRY(mm.xw(e, dg, w.upGate(e, true), 1.0f, dxe));
    MOE_CUDA_TRY(mm.gTx(e, du, xe, beta, dw1 + e * s.F * s.H));
    return mm.gTx(e, dg, xe, beta, dw3 + e * s.F * s.H);
  }));
  if (args.bf16Rows)
    MOE_CUDA_TRY(roundToBf16(dxs.get(), rows * s.H, stream));
  // dx adds each token's rows in expert order, unweighted.
  MOE_DEVICE_BUFFER(float, ones, s.T * s.topK, stream);
  MOE_CUDA_TRY(fill(ones.get(), 1.0f, s.T * s.topK, stream));
  if (out.dxBf16)
    return combineRows(dxs.get(), groups->positionOfSlot.get(), indices,
                       ones.get(), s.T, s.topK, s.H, out.dxBf16, stream);
  return combineRows(dxs.get(), groups->positionOfSlot.get(), indices,
                     ones.get(), s.T, s.topK, s.H, dx, stream);
}

bool readsBf16Operand(const DeviceStep &step, size_t index, uint32_t buffer) {
  const Instruction &inst = step.program.instructions[index];
  std::optional<ops::ExpertsRecipe> found = ops::expertsRecipeOf(inst);
  if (!found)
    return false;
  const ops::ExpertsRecipe &recipe = *found;
  // FP8 GEMMs quantize the weights' fp32 values.
  if (recipe.fp8Scaling && *recipe.fp8Scaling != Fp8Scaling::None)
    return false;
  if (step.buffer(buffer).dtype != DType::BF16)
    return false;
  size_t first = recipe.firstOperand;
  for (size_t weight = first + 3; weight <= first + 5; ++weight)
    if (inst.operands[weight] == buffer)
      return true;
  // On one rank the tokens' rows are gathered from x (and dy) as they are
  // stored and the result is written so; expert parallelism's exchanges
  // still take fp32 rows.
  if (recipe.group)
    return false;
  bool backward = !recipe.forward;
  return buffer == inst.operands[first] ||
         (backward && buffer == inst.operands[0]) || buffer == inst.results[0];
}

ExpertsArgs expertsArgsOf(const DeviceStep &step, size_t index) {
  const Instruction &inst = step.program.instructions[index];
  // ExpertsGrad's operands are Experts' after dy.
  ops::ExpertsRecipe recipe = *ops::expertsRecipeOf(inst);
  size_t first = recipe.firstOperand;
  const std::vector<uint32_t> &in = inst.operands;
  const std::vector<int64_t> &w1 = step.buffer(in[first + 3]).shape;
  const Buffer &x = step.buffer(in[first]);
  ExpertsArgs args;
  if (readsBf16Operand(step, index, in[first]))
    args.xBf16 = step.bf16(in[first]);
  else
    args.x = step.f32(in[first]);
  if (first > 0 && readsBf16Operand(step, index, in[0]))
    args.dyBf16 = step.bf16(in[0]);
  if (first == 0 && readsBf16Operand(step, index, inst.results[0]))
    args.yBf16 = step.bf16(inst.results[0]);
  args.weights = step.f32(in[first + 1]);
  args.indices = step.i32(in[first + 2]);
  if (readsBf16Operand(step, index, in[first + 3])) {
    args.w1 = args.w3 = args.w2 = nullptr;
    args.w1Bf16 = step.bf16(in[first + 3]);
    args.w3Bf16 = step.bf16(in[first + 4]);
    args.w2Bf16 = step.bf16(in[first + 5]);
  } else {
    args.w1 = step.f32(in[first + 3]);
    args.w3 = step.f32(in[first + 4]);
    args.w2 = step.f32(in[first + 5]);
  }
  args.shapes = {rowsOf(x), x.shape.back(), w1[1], w1[0],
                 step.buffer(in[first + 1]).shape.back()};
  args.bf16X = x.dtype == DType::BF16;
  args.bf16Dy = first > 0 && step.buffer(in[0]).dtype == DType::BF16;
  args.bf16Rows = step.buffer(inst.results[0]).dtype == DType::BF16;
  if (recipe.hidden && recipe.forward)
    args.hiddenOut = step.f32(*recipe.hidden);
  else if (recipe.hidden)
    args.hiddenIn = step.f32(*recipe.hidden);
  return args;
}

absl::Status runExpertsForward(const DeviceStep &step, size_t index) {
  absl::StatusOr<std::optional<DeviceFp8>> fp8 = deviceFp8Of(step, index);
  if (!fp8.ok())
    return fp8.status();
  ExpertMatmul mm(step, *fp8);
  const Instruction &inst = step.program.instructions[index];
  ExpertsArgs args = expertsArgsOf(step, index);
  float *y = args.yBf16 ? nullptr : step.f32(inst.results[0]);
  if (ops::expertsRecipeOf(inst)->group)
    return expertParallelForward(step, index, mm, args, y);
  return expertsForwardOn(step, mm, args, y);
}

absl::Status runExpertsBackward(const DeviceStep &step, size_t index) {
  absl::StatusOr<std::optional<DeviceFp8>> fp8 = deviceFp8Of(step, index);
  if (!fp8.ok())
    return fp8.status();
  ExpertMatmul mm(step, *fp8);
  const Instruction &inst = step.program.instructions[index];
  const std::vector<uint32_t> &out = inst.results;
  ExpertsArgs args = expertsArgsOf(step, index);
  ExpertGradients gradients{step.f32(out[0]), step.f32(out[1]),
                            step.f32(out[2]), step.f32(out[3]),
                            step.f32(out[4])};
  if (readsBf16Operand(step, index, out[0])) {
    gradients.dx = nullptr;
    gradients.dxBf16 = step.bf16(out[0]);
  }
  const float *dy = args.dyBf16 ? nullptr : step.f32(inst.operands[0]);
  if (ops::expertsRecipeOf(inst)->group)
    return expertParallelBackward(step, index, mm, args, dy, gradients);
  return expertsBackwardOn(step, mm, args, dy, gradients);
}

} // namespace moe::rt::cuda
