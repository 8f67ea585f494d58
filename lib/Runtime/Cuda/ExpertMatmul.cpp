//===- ExpertMatmul.cpp - one expert's GEMMs, BF16 or FP8 -----------------===//
#include "ExpertMatmul.h"

#include "DeviceBuffer.h"

#include "moe/Runtime/Artifact/ExpertsRecipe.h"

#include "moe/Runtime/Cuda/Device.h"

#include "absl/strings/str_cat.h"

namespace moe::rt::cuda {
namespace {

GemmInput inputOf(Fp8Format format) {
  return format == Fp8Format::E4M3 ? GemmInput::E4M3 : GemmInput::E5M2;
}

/// FP8 GEMMs need k and the leading dimensions to be multiples of 16.
int64_t paddedTo16(int64_t n) { return (n + 15) / 16 * 16; }

GemmSpec rowMajor(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                  int64_t lda, int64_t ldb, int64_t ldc) {
  GemmSpec spec;
  spec.transA = transA, spec.transB = transB;
  spec.m = m, spec.n = n, spec.k = k;
  spec.lda = lda, spec.ldb = ldb, spec.ldc = ldc;
  return spec;
}

/// An operand's FP8 codes (transposed into [cols, outLd] if asked) and its
/// dequantization scale.
struct Quantized {
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> inverseScale;
};

/// The amax an operand's scale comes from, in amaxes (two floats): its
/// own ([0]) or, with delayed scaling, its history's ([1], after folding
/// [0] into the history).
absl::StatusOr<const float *> scaleSource(const DeviceStep &step,
                                          const DeviceFp8 &fp8, int64_t expert,
                                          const ExpertOperand &op,
                                          float *amaxes) {
  MOE_CUDA_TRY(absMax(op.data, op.rows * op.cols, amaxes, step.stream));
  if (!fp8.delayed)
    return static_cast<const float *>(amaxes);
  float *history = fp8.history + (expert * cpu::kFp8ExpertRoles +
                                  static_cast<int64_t>(op.role)) *
                                     fp8.historyLength;
  MOE_CUDA_TRY(delayedAmax(amaxes, history, fp8.historyLength, amaxes + 1,
                           step.stream));
  return static_cast<const float *>(amaxes + 1);
}

absl::StatusOr<Quantized> quantize(const DeviceStep &step,
                                   const DeviceFp8 &fp8, int64_t expert,
                                   const ExpertOperand &op, bool transpose,
                                   int64_t outLd) {
  cudaStream_t stream = step.stream;
  MOE_DEVICE_BUFFER(float, amax, 2, stream);
  absl::StatusOr<const float *> scaleFrom =
      scaleSource(step, fp8, expert, op, amax.get());
  if (!scaleFrom.ok())
    return scaleFrom.status();
  Quantized q;
  MOE_DEVICE_BUFFER(uint8_t, codes,
                    transpose ? op.cols * outLd : op.rows * op.cols, stream);
  MOE_DEVICE_BUFFER(float, inverse, 1, stream);
  if (transpose)
    MOE_CUDA_TRY(castTransposeToFp8(op.data, *scaleFrom, codes.get(),
                                    inverse.get(), op.rows, op.cols, outLd,
                                    op.format, stream));
  else
    MOE_CUDA_TRY(castToFp8(op.data, *scaleFrom, codes.get(), inverse.get(),
                           op.rows * op.cols, op.format, stream));
  q.codes = std::move(codes);
  q.inverseScale = std::move(inverse);
  return q;
}

#define MOE_QUANTIZED(name, ...)                                               \
  auto name##_made = quantize(__VA_ARGS__);                                    \
  if (!name##_made.ok())                                                       \
    return name##_made.status();                                               \
  Quantized name = std::move(*name##_made)

absl::Status fp8Gemm(const DeviceStep &step, GemmSpec spec,
                     const ExpertOperand &a, const Quantized &qa,
                     const ExpertOperand &b, const Quantized &qb, float beta,
                     float *c) {
  spec.a = inputOf(a.format);
  spec.b = inputOf(b.format);
  return step.gemms.run(spec, 1.0f, qa.codes.get(), qb.codes.get(), beta, c,
                        step.stream, qa.inverseScale.get(),
                        qb.inverseScale.get());
}

/// c = op(a) op(b) + beta c on BF16 operands: each read as it is where it
/// has BF16 values, else cast into scratch for this GEMM.
absl::Status bf16Gemm(const DeviceStep &step, const GemmSpec &spec,
                      const ExpertOperand &a, const ExpertOperand &b,
                      float beta, float *c) {
  DeviceBuffer<uint16_t> aCopy, bCopy;
  auto bitsOf =
      [&](const ExpertOperand &op,
          DeviceBuffer<uint16_t> &copy) -> absl::StatusOr<const uint16_t *> {
    if (op.bf16)
      return op.bf16;
    if (!op.data)
      return absl::InternalError("expert GEMM operand has no values");
    return step.castToBf16Scratch(op.data, op.rows * op.cols, copy);
  };
  absl::StatusOr<const uint16_t *> aBits = bitsOf(a, aCopy);
  if (!aBits.ok())
    return aBits.status();
  absl::StatusOr<const uint16_t *> bBits = bitsOf(b, bCopy);
  if (!bBits.ok())
    return bBits.status();
  return step.gemm(spec, *aBits, *bBits, beta, c);
}

} // namespace

absl::Status ExpertMatmul::xwT(int64_t expert, const ExpertOperand &x,
                               const ExpertOperand &w, float beta,
                               float *y) const {
  GemmSpec spec = rowMajor(false, true, x.rows, w.rows, x.cols, x.cols, w.cols,
                           w.rows);
  if (!fp8)
    return bf16Gemm(step, spec, x, w, beta, y);
  MOE_QUANTIZED(qx, step, *fp8, expert, x, false, 0);
  MOE_QUANTIZED(qw, step, *fp8, expert, w, false, 0);
  return fp8Gemm(step, spec, x, qx, w, qw, beta, y);
}

absl::Status ExpertMatmul::xw(int64_t expert, const ExpertOperand &x,
                              const ExpertOperand &w, float beta,
                              float *y) const {
  if (!fp8)
    return bf16Gemm(
        step,
        rowMajor(false, false, x.rows, w.cols, x.cols, x.cols, w.cols, w.cols),
        x, w, beta, y);
  // x w = x (w^T)^T: the transposed weight [out, k] is what FP8 reads.
  MOE_QUANTIZED(qx, step, *fp8, expert, x, false, 0);
  MOE_QUANTIZED(qw, step, *fp8, expert, w, true, w.rows);
  return fp8Gemm(step,
                 rowMajor(false, true, x.rows, w.cols, x.cols, x.cols, w.rows,
                          w.cols),
                 x, qx, w, qw, beta, y);
}

absl::Status ExpertMatmul::gTx(int64_t expert, const ExpertOperand &g,
                               const ExpertOperand &x, float *dw) const {
  if (!fp8)
    return bf16Gemm(
        step,
        rowMajor(true, false, g.cols, x.cols, g.rows, g.cols, x.cols, x.cols),
        g, x, 0.0f, dw);
  // g^T x = (g^T) ((x^T))^T, both transposed with the rows (k) padded with
  // zeros to a multiple of 16.
  int64_t k = paddedTo16(g.rows);
  MOE_QUANTIZED(qg, step, *fp8, expert, g, true, k);
  MOE_QUANTIZED(qx, step, *fp8, expert, x, true, k);
  return fp8Gemm(step, rowMajor(false, true, g.cols, x.cols, k, k, k, x.cols),
                 g, qg, x, qx, 0.0f, dw);
}

absl::Status ExpertMatmul::rounded(int64_t expert, const ExpertOperand &op,
                                   float *out) const {
  int64_t n = op.rows * op.cols;
  if (!fp8) {
    if (out != op.data)
      MOE_CUDA_OK(cudaMemcpyAsync(out, op.data, n * sizeof(float),
                                  cudaMemcpyDeviceToDevice, step.stream));
    return absl::OkStatus();
  }
  MOE_DEVICE_BUFFER(float, amax, 2, step.stream);
  absl::StatusOr<const float *> scaleFrom =
      scaleSource(step, *fp8, expert, op, amax.get());
  if (!scaleFrom.ok())
    return scaleFrom.status();
  return roundToFp8(op.data, *scaleFrom, out, n, op.format, step.stream);
}

absl::StatusOr<std::optional<DeviceFp8>> deviceFp8Of(const DeviceStep &step,
                                                     size_t index) {
  const Instruction &inst = step.program.instructions[index];
  ops::ExpertsRecipe recipe = *ops::expertsRecipeOf(inst);
  // No recipe, or FP8 on the wire only: BF16 GEMMs.
  if (!recipe.fp8Scaling || *recipe.fp8Scaling == Fp8Scaling::None)
    return std::optional<DeviceFp8>();
  auto refused = [&](const std::string &why) {
    return absl::UnimplementedError(absl::StrCat(
        describeInstruction(step.program, index), ": ", why));
  };
  // Recipes and widths the backend lacks were refused at load
  // (checkCapabilities); what is left is the GPU itself.
  int capability = step.gemms.deviceCapability();
  if (!hasFp8TensorCores(capability))
    return refused(absl::StrCat(
        "FP8 GEMMs need sm_89 or newer, this GPU is sm_", capability,
        ": compile with --target=a100 (no FP8 GEMMs)"));
  DeviceFp8 fp8;
  if (recipe.amaxHistory) {
    uint32_t history = *recipe.amaxHistory;
    fp8.delayed = true;
    fp8.history = step.f32(history);
    fp8.historyLength = step.buffer(history).shape[2];
  }
  return std::optional<DeviceFp8>(fp8);
}

} // namespace moe::rt::cuda
