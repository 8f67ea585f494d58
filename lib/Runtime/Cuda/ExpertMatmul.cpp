//===- ExpertMatmul.cpp - one expert's GEMMs, BF16 or FP8 -----------------===//
#include "ExpertMatmul.h"

#include "DeviceBuffer.h"
#include "Fp8BlockScaling.h"

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

bool isWeight(cpu::Fp8ExpertRole role) {
  return role == cpu::Fp8ExpertRole::W1 || role == cpu::Fp8ExpertRole::W2 ||
         role == cpu::Fp8ExpertRole::W3;
}

/// Block-scaled GEMMs need m (the activation's rows) a multiple of 4; 16
/// keeps the padded rows aligned as the rest.
int64_t paddedRows(int64_t n) { return (n + 15) / 16 * 16; }

/// An operand's E4M3 codes and block scales as the block-scaled GEMM reads
/// them: an activation [n, k] by runs, its rows padded with zeros; a weight
/// by squares, as [out, k] (transposed from [k, out] where stored so).
struct BlockCodes {
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;
};

absl::StatusOr<BlockCodes> blockCodes(const DeviceStep &step,
                                      const ExpertOperand &op, bool transpose) {
  cudaStream_t stream = step.stream;
  bool weight = isWeight(op.role);
  if (!op.data)
    return absl::InternalError("expert GEMM operand has no fp32 values");
  // The codes matrix [rows, k] the GEMM reads, and its padded rows.
  int64_t rows = transpose ? op.cols : op.rows;
  int64_t k = transpose ? op.rows : op.cols;
  int64_t padded = weight ? rows : paddedRows(rows);
  GemmScaling scaling = weight ? GemmScaling::Squares128 : GemmScaling::Rows128;
  int64_t scaleCount = gemmScaleCount(scaling, padded, k);
  BlockCodes q;
  MOE_DEVICE_BUFFER(uint8_t, codes, padded * k, stream);
  MOE_DEVICE_BUFFER(float, scales, scaleCount, stream);
  // Padding rows, and the squares' padding scales, stay zero.
  if (padded != rows)
    MOE_CUDA_OK(cudaMemsetAsync(codes.get() + rows * k, 0, (padded - rows) * k,
                                stream));
  MOE_CUDA_OK(
      cudaMemsetAsync(scales.get(), 0, scaleCount * sizeof(float), stream));
  Fp8BlockOutputs out;
  out.codes = codes.get();
  out.transpose = transpose;
  out.codesLd = transpose ? op.rows : op.cols;
  out.inverseScales = scales.get();
  out.scaling = scaling;
  out.scaleRows = padded;
  MOE_CUDA_TRY(quantizeFp8Blocks(op.data, op.rows, op.cols, weight,
                                 Fp8Format::E4M3, out, stream));
  q.codes = std::move(codes);
  q.scales = std::move(scales);
  return q;
}

#define MOE_BLOCK_CODES(name, ...)                                             \
  auto name##_made = blockCodes(__VA_ARGS__);                                  \
  if (!name##_made.ok())                                                       \
    return name##_made.status();                                               \
  BlockCodes name = std::move(*name##_made)

/// y[n, out] = x[n, k] w^T + beta y on cuBLASLt's block scaling, w stored
/// [out, k] or (`transposed`) [k, out]. The GEMM writes padded rows into
/// scratch when n is not a multiple of 16.
absl::Status blockScaledGemm(const DeviceStep &step, const ExpertOperand &x,
                             const ExpertOperand &w, bool transposed,
                             float beta, float *y) {
  cudaStream_t stream = step.stream;
  int64_t n = x.rows, k = x.cols, out = transposed ? w.cols : w.rows;
  int64_t padded = paddedRows(n);
  MOE_BLOCK_CODES(qx, step, x, false);
  MOE_BLOCK_CODES(qw, step, w, transposed);
  GemmSpec spec = rowMajor(false, true, padded, out, k, k, k, out);
  spec.a = spec.b = GemmInput::E4M3;
  spec.aScaling = GemmScaling::Rows128;
  spec.bScaling = GemmScaling::Squares128;
  if (padded == n)
    return step.gemms.run(spec, 1.0f, qx.codes.get(), qw.codes.get(), beta, y,
                          stream, qx.scales.get(), qw.scales.get());
  MOE_DEVICE_BUFFER(float, full, padded * out, stream);
  MOE_CUDA_TRY(step.gemms.run(spec, 1.0f, qx.codes.get(), qw.codes.get(), 0.0f,
                              full.get(), stream, qx.scales.get(),
                              qw.scales.get()));
  // beta is 0 (a new result) or 1 (dx adds the second projection's).
  if (beta == 0.0f) {
    MOE_CUDA_OK(cudaMemcpyAsync(y, full.get(), n * out * sizeof(float),
                                cudaMemcpyDeviceToDevice, stream));
    return absl::OkStatus();
  }
  if (beta != 1.0f)
    return absl::InternalError("block-scaled expert GEMM: beta must be 0 or 1");
  return add(y, full.get(), y, n * out, stream);
}

/// A BF16 copy of the values blockwise FP8 rounds `op` to (by runs of its
/// rows, as an activation or gradient), for a GEMM whose k crosses the
/// blocks.
absl::StatusOr<const uint16_t *>
blockRoundedBf16(const DeviceStep &step, const ExpertOperand &op,
                 DeviceBuffer<uint16_t> &copy) {
  if (!op.data)
    return absl::InternalError("expert GEMM operand has no fp32 values");
  MOE_DEVICE_BUFFER(uint16_t, bits, op.rows * op.cols, step.stream);
  Fp8BlockOutputs out;
  out.roundedBf16 = bits.get();
  MOE_CUDA_TRY(quantizeFp8Blocks(op.data, op.rows, op.cols, false,
                                 Fp8Format::E4M3, out, step.stream));
  copy = std::move(bits);
  return static_cast<const uint16_t *>(copy.get());
}

} // namespace

absl::Status ExpertMatmul::xwT(int64_t expert, const ExpertOperand &x,
                               const ExpertOperand &w, float beta,
                               float *y) const {
  GemmSpec spec = rowMajor(false, true, x.rows, w.rows, x.cols, x.cols, w.cols,
                           w.rows);
  if (!fp8)
    return bf16Gemm(step, spec, x, w, beta, y);
  if (fp8->blockwise)
    return blockScaledGemm(step, x, w, /*transposed=*/false, beta, y);
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
  if (fp8->blockwise)
    return blockScaledGemm(step, x, w, /*transposed=*/true, beta, y);
  // x w = x (w^T)^T: the transposed weight [out, k] is what FP8 reads.
  MOE_QUANTIZED(qx, step, *fp8, expert, x, false, 0);
  MOE_QUANTIZED(qw, step, *fp8, expert, w, true, w.rows);
  return fp8Gemm(step,
                 rowMajor(false, true, x.rows, w.cols, x.cols, x.cols, w.rows,
                          w.cols),
                 x, qx, w, qw, beta, y);
}

absl::Status ExpertMatmul::gTx(int64_t expert, const ExpertOperand &g,
                               const ExpertOperand &x, float beta,
                               float *dw) const {
  if (!fp8)
    return bf16Gemm(
        step,
        rowMajor(true, false, g.cols, x.cols, g.rows, g.cols, x.cols, x.cols),
        g, x, beta, dw);
  if (fp8->blockwise) {
    // k runs along the tokens, across the runs' blocks: the FP8 values in
    // a BF16 GEMM.
    DeviceBuffer<uint16_t> gCopy, xCopy;
    absl::StatusOr<const uint16_t *> gBits = blockRoundedBf16(step, g, gCopy);
    if (!gBits.ok())
      return gBits.status();
    absl::StatusOr<const uint16_t *> xBits = blockRoundedBf16(step, x, xCopy);
    if (!xBits.ok())
      return xBits.status();
    return step.gemm(
        rowMajor(true, false, g.cols, x.cols, g.rows, g.cols, x.cols, x.cols),
        *gBits, *xBits, beta, dw);
  }
  // g^T x = (g^T) ((x^T))^T, both transposed with the rows (k) padded with
  // zeros to a multiple of 16.
  int64_t k = paddedTo16(g.rows);
  MOE_QUANTIZED(qg, step, *fp8, expert, g, true, k);
  MOE_QUANTIZED(qx, step, *fp8, expert, x, true, k);
  return fp8Gemm(step, rowMajor(false, true, g.cols, x.cols, k, k, k, x.cols),
                 g, qg, x, qx, beta, dw);
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
  if (fp8->blockwise) {
    Fp8BlockOutputs blocks;
    blocks.rounded = out;
    return quantizeFp8Blocks(op.data, op.rows, op.cols, isWeight(op.role),
                             Fp8Format::E4M3, blocks, step.stream);
  }
  MOE_DEVICE_BUFFER(float, amax, 2, step.stream);
  absl::StatusOr<const float *> scaleFrom =
      scaleSource(step, *fp8, expert, op, amax.get());
  if (!scaleFrom.ok())
    return scaleFrom.status();
  return roundToFp8(op.data, *scaleFrom, out, n, op.format, step.stream);
}

absl::Status checkFp8OnDevice(const Program &program, size_t index,
                              int computeCapability) {
  std::optional<ops::ExpertsRecipe> recipe =
      ops::expertsRecipeOf(program.instructions[index]);
  // No recipe, or FP8 on the wire only: BF16 GEMMs, which every GPU runs.
  if (!recipe || !recipe->fp8Scaling ||
      *recipe->fp8Scaling == Fp8Scaling::None)
    return absl::OkStatus();
  auto refused = [&](const std::string &why) {
    return absl::UnimplementedError(
        absl::StrCat(describeInstruction(program, index), ": ", why));
  };
  // Recipes and widths the backend lacks were refused by checkCapabilities
  // (the artifact's target); what is left is the GPU itself.
  if (!hasFp8TensorCores(computeCapability))
    return refused(absl::StrCat(
        "FP8 GEMMs need sm_89 or newer, this GPU is sm_", computeCapability,
        ": compile with --target=a100 (no FP8 GEMMs)"));
  if (*recipe->fp8Scaling == Fp8Scaling::Blockwise) {
    if (computeCapability < 90)
      return refused(absl::StrCat(
          "blockwise FP8 needs cuBLASLt's block scaling (sm_90), this GPU "
          "is sm_",
          computeCapability,
          ": compile with --fp8-scaling=tensorwise or delayed"));
    if (recipe->fp8Block != fp8blocks::kBlock)
      return refused(absl::StrCat("blockwise FP8 on the GPU takes blocks of ",
                                  fp8blocks::kBlock, ", not ",
                                  recipe->fp8Block));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<DeviceFp8>> deviceFp8Of(const DeviceStep &step,
                                                     size_t index) {
  const Instruction &inst = step.program.instructions[index];
  ops::ExpertsRecipe recipe = *ops::expertsRecipeOf(inst);
  // No recipe, or FP8 on the wire only: BF16 GEMMs.
  if (!recipe.fp8Scaling || *recipe.fp8Scaling == Fp8Scaling::None)
    return std::optional<DeviceFp8>();
  if (absl::Status status = checkFp8OnDevice(
          step.program, index, step.gemms.deviceCapability());
      !status.ok())
    return status;
  DeviceFp8 fp8;
  fp8.blockwise = *recipe.fp8Scaling == Fp8Scaling::Blockwise;
  if (recipe.amaxHistory) {
    uint32_t history = *recipe.amaxHistory;
    fp8.delayed = true;
    fp8.history = step.f32(history);
    fp8.historyLength = step.buffer(history).shape[2];
  }
  return std::optional<DeviceFp8>(fp8);
}

} // namespace moe::rt::cuda
