//===- Elementwise.cu - adds, SwiGLU, fills and the casts of GEMM inputs --===//
//
// Grid-stride loops, one element per iteration. The FP8 casts use CUDA's
// conversion intrinsics (round to nearest even, saturating to the largest
// finite value), which the CPU's emulation (cpu::encodeFp8) matches code
// for code.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"
#include "moe/Runtime/StepSemantics.h"

#include "BlockReduce.cuh"
#include "Launch.h"
#include "SharedMemory.cuh"
#include "Storage.cuh"

#include "absl/strings/str_cat.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace moe::rt::cuda {
namespace {

#define GRID_STRIDE(i, n)                                                      \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);   \
       i += int64_t(blockDim.x) * gridDim.x)

__device__ float silu(float x) { return x / (1.0f + expf(-x)); }

// S: the storage type (Storage.cuh), float or BF16 bits.

template <typename S>
__global__ void addKernel(const S *a, const S *b, S *y, int64_t n) {
  GRID_STRIDE(i, n) storeValue(y + i, loadValue(a + i) + loadValue(b + i));
}

/// In and Out: float or BF16 bits; fp32 in with BF16 out rounds each
/// result once (a BF16 GEMM's input, the fp32 result cast).
template <typename In, typename Out>
__global__ void swigluForwardKernel(const In *gate, const In *up, Out *y,
                                    int64_t n) {
  GRID_STRIDE(i, n)
  storeValue(y + i, silu(loadValue(gate + i)) * loadValue(up + i));
}

template <typename S>
__global__ void swigluBackwardKernel(const S *dy, const S *gate, const S *up,
                                     S *dgate, S *dup, int64_t n) {
  GRID_STRIDE(i, n) {
    float g = loadValue(gate + i), u = loadValue(up + i), d = loadValue(dy + i);
    float sigmoid = 1.0f / (1.0f + expf(-g));
    float s = g * sigmoid;
    // silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
    storeValue(dgate + i, d * u * sigmoid * (1.0f + g * (1.0f - sigmoid)));
    storeValue(dup + i, d * s);
  }
}

__global__ void divideKernel(const float *x, float divisor, float *y,
                             int64_t n) {
  GRID_STRIDE(i, n) y[i] = x[i] / divisor;
}

__global__ void fillKernel(float *x, float value, int64_t n) {
  GRID_STRIDE(i, n) x[i] = value;
}

__global__ void castToBf16Kernel(const float *x, uint16_t *out, int64_t n) {
  GRID_STRIDE(i, n) out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

/// BF16 is fp32's upper half: the widening is exact.
__global__ void castFromBf16Kernel(const uint16_t *x, float *out, int64_t n) {
  GRID_STRIDE(i, n) out[i] = __uint_as_float(uint32_t{x[i]} << 16);
}

__global__ void roundToBf16Kernel(float *x, int64_t n) {
  GRID_STRIDE(i, n) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

/// |x| as unsigned bits: for non-negative floats the integer order is the
/// float order, and NaN (above infinity) wins a maximum, as cpu::absMax
/// returns NaN for a tensor holding one.
__global__ void absMaxKernel(const float *x, int64_t n, unsigned *amaxBits) {
  MOE_BLOCK_SHARED(unsigned, block, kThreads);
  unsigned mine = 0;
  GRID_STRIDE(i, n) mine = max(mine, __float_as_uint(fabsf(x[i])));
  mine = blockReduce(mine, block, [](unsigned a, unsigned b) { return max(a, b); });
  if (threadIdx.x == 0)
    atomicMax(amaxBits, mine);
}

/// cpu::fp8Scale: the rule of StepSemantics.h.
__device__ float fp8Scale(float amax, Fp8Format format) {
  return semantics::fp8Scale(
      amax, semantics::fp8MaxFinite(static_cast<int>(format)));
}

__device__ uint8_t encode(float value, Fp8Format format) {
  return __nv_cvt_float_to_fp8(value, __NV_SATFINITE,
                               format == Fp8Format::E4M3 ? __NV_E4M3
                                                         : __NV_E5M2);
}

__global__ void castToFp8Kernel(const float *x, const float *amax,
                                uint8_t *codes, float *inverseScale, int64_t n,
                                Fp8Format format) {
  float scale = fp8Scale(*amax, format);
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *inverseScale = 1.0f / scale;
  GRID_STRIDE(i, n) codes[i] = encode(x[i] * scale, format);
}

__global__ void roundToFp8Kernel(const float *x, const float *amax, float *out,
                                 int64_t n, Fp8Format format) {
  float scale = fp8Scale(*amax, format);
  __nv_fp8_interpretation_t kind =
      format == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  GRID_STRIDE(i, n) {
    __half_raw value = __nv_cvt_fp8_to_halfraw(encode(x[i] * scale, format), kind);
    out[i] = __half2float(__half(value)) / scale;
  }
}

/// Output element i = (c, r) of the [cols, outLd] transpose; consecutive
/// threads write consecutive codes. Padding columns r >= rows are zero.
__global__ void castTransposeToFp8Kernel(const float *x, const float *amax,
                                         uint8_t *codes, float *inverseScale,
                                         int64_t rows, int64_t cols,
                                         int64_t outLd, Fp8Format format) {
  float scale = fp8Scale(*amax, format);
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *inverseScale = 1.0f / scale;
  GRID_STRIDE(i, cols * outLd) {
    int64_t c = i / outLd, r = i % outLd;
    codes[i] = r < rows ? encode(x[r * cols + c] * scale, format) : 0;
  }
}

__global__ void delayedAmaxKernel(const float *current, float *history,
                                  int64_t length, float *amaxToUse) {
  float now = *current;
  *amaxToUse = semantics::delayedAmax(history, length, now);
  semantics::recordAmax(history, now);
}

__global__ void rollAmaxHistoriesKernel(float *histories, int64_t rows,
                                        int64_t length,
                                        const StepCheck *check) {
  if (check && check->kind != StepCheck::Passed)
    return;
  GRID_STRIDE(r, rows) semantics::rollAmaxHistory(histories + r * length, length);
}

template <typename Word>
__global__ void interleaveBlocksKernel(const Word *from, Word *to,
                                       int64_t outer, int64_t parts,
                                       int64_t chunk, bool pack) {
  semantics::CollectiveBlocks blocks{outer, chunk};
  int64_t block = outer * chunk;
  GRID_STRIDE(i, outer * parts * chunk) {
    // i indexes the packed [parts, outer, chunk] layout.
    int64_t r = i / block, o = (i % block) / chunk, c = i % chunk;
    int64_t strided = semantics::stridedOffset(blocks, parts, o, r) + c;
    if (pack)
      to[i] = from[strided];
    else
      to[strided] = from[i];
  }
}

/// One block per row; the row's products summed in double.
__global__ void rowDotsKernel(const float *a, const float *b, int64_t width,
                              float *out) {
  MOE_BLOCK_SHARED(double, partial, kThreads);
  const float *ar = a + blockIdx.x * width, *br = b + blockIdx.x * width;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    sum += static_cast<double>(ar[i]) * br[i];
  sum = blockSum(sum, partial);
  if (threadIdx.x == 0)
    out[blockIdx.x] = static_cast<float>(sum);
}

__global__ void scaleRowsKernel(float *x, const float *scales, int64_t rows,
                                int64_t width) {
  GRID_STRIDE(i, rows * width) x[i] *= scales[i / width];
}

__global__ void scatterValuesKernel(const float *values, const int64_t *slots,
                                    int64_t count, float *out) {
  GRID_STRIDE(r, count) out[slots[r]] = values[r];
}

} // namespace

absl::Status interleaveBlocks(const void *from, void *to, int64_t outer,
                              int64_t parts, int64_t chunk, bool pack,
                              cudaStream_t stream, int elementBytes) {
  if (elementBytes == 2)
    return launch("interleaveBlocks", interleaveBlocksKernel<uint16_t>,
                  gridFor(outer * parts * chunk), kThreads, 0, stream,
                  static_cast<const uint16_t *>(from),
                  static_cast<uint16_t *>(to), outer, parts, chunk, pack);
  if (elementBytes == 4)
    return launch("interleaveBlocks", interleaveBlocksKernel<uint32_t>,
                  gridFor(outer * parts * chunk), kThreads, 0, stream,
                  static_cast<const uint32_t *>(from),
                  static_cast<uint32_t *>(to), outer, parts, chunk, pack);
  return absl::InvalidArgumentError(
      absl::StrCat("interleaveBlocks: elements of ", elementBytes,
                   " bytes (expected 2 or 4)"));
}

absl::Status rowDots(const float *a, const float *b, int64_t rows,
                     int64_t width, float *out, cudaStream_t stream) {
  if (rows == 0)
    return absl::OkStatus();
  if (rows > 0x7fffffff)
    return absl::InvalidArgumentError("rowDots: more than 2^31 - 1 rows");
  return launch("rowDots", rowDotsKernel, static_cast<unsigned>(rows), kThreads,
                0, stream, a, b, width, out);
}

absl::Status scaleRows(float *x, const float *scales, int64_t rows,
                       int64_t width, cudaStream_t stream) {
  return launch("scaleRows", scaleRowsKernel, gridFor(rows * width), kThreads,
                0, stream, x, scales, rows, width);
}

absl::Status scatterValues(const float *values, const int64_t *slots,
                           int64_t count, float *out, cudaStream_t stream) {
  return launch("scatterValues", scatterValuesKernel, gridFor(count), kThreads,
                0, stream, values, slots, count, out);
}

absl::Status add(const float *a, const float *b, float *y, int64_t n,
                 cudaStream_t stream) {
  return launch("add", addKernel<float>, gridFor(n), kThreads, 0, stream, a, b,
                y, n);
}

absl::Status add(const uint16_t *a, const uint16_t *b, uint16_t *y, int64_t n,
                 cudaStream_t stream) {
  return launch("add (bf16)", addKernel<uint16_t>, gridFor(n), kThreads, 0,
                stream, a, b, y, n);
}

absl::Status swigluForward(const float *gate, const float *up, float *y,
                           int64_t n, cudaStream_t stream) {
  return launch("swigluForward", swigluForwardKernel<float, float>, gridFor(n),
                kThreads, 0, stream, gate, up, y, n);
}

absl::Status swigluForward(const float *gate, const float *up, uint16_t *y,
                           int64_t n, cudaStream_t stream) {
  return launch("swigluForward (into bf16)",
                swigluForwardKernel<float, uint16_t>, gridFor(n), kThreads, 0,
                stream, gate, up, y, n);
}

absl::Status swigluForward(const uint16_t *gate, const uint16_t *up,
                           uint16_t *y, int64_t n, cudaStream_t stream) {
  return launch("swigluForward (bf16)", swigluForwardKernel<uint16_t, uint16_t>,
                gridFor(n), kThreads, 0, stream, gate, up, y, n);
}

absl::Status swigluBackward(const float *dy, const float *gate,
                            const float *up, float *dgate, float *dup,
                            int64_t n, cudaStream_t stream) {
  return launch("swigluBackward", swigluBackwardKernel<float>, gridFor(n),
                kThreads, 0, stream, dy, gate, up, dgate, dup, n);
}

absl::Status swigluBackward(const uint16_t *dy, const uint16_t *gate,
                            const uint16_t *up, uint16_t *dgate, uint16_t *dup,
                            int64_t n, cudaStream_t stream) {
  return launch("swigluBackward (bf16)", swigluBackwardKernel<uint16_t>,
                gridFor(n), kThreads, 0, stream, dy, gate, up, dgate, dup, n);
}

absl::Status divide(const float *x, float divisor, float *y, int64_t n,
                    cudaStream_t stream) {
  return launch("divide", divideKernel, gridFor(n), kThreads, 0, stream, x,
                divisor, y, n);
}

absl::Status fill(float *x, float value, int64_t n, cudaStream_t stream) {
  return launch("fill", fillKernel, gridFor(n), kThreads, 0, stream, x, value,
                n);
}

absl::Status castToBf16(const float *x, uint16_t *out, int64_t n,
                        cudaStream_t stream) {
  return launch("castToBf16", castToBf16Kernel, gridFor(n), kThreads, 0, stream,
                x, out, n);
}

absl::Status castFromBf16(const uint16_t *x, float *out, int64_t n,
                          cudaStream_t stream) {
  return launch("castFromBf16", castFromBf16Kernel, gridFor(n), kThreads, 0,
                stream, x, out, n);
}

absl::Status roundToBf16(float *x, int64_t n, cudaStream_t stream) {
  return launch("roundToBf16", roundToBf16Kernel, gridFor(n), kThreads, 0,
                stream, x, n);
}

absl::Status absMax(const float *x, int64_t n, float *amax,
                    cudaStream_t stream) {
  MOE_CUDA_OK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  return launch("absMax", absMaxKernel, gridFor(n), kThreads, 0, stream, x, n,
                reinterpret_cast<unsigned *>(amax));
}

absl::Status castToFp8(const float *x, const float *amax, uint8_t *codes,
                       float *inverseScale, int64_t n, Fp8Format format,
                       cudaStream_t stream) {
  return launch("castToFp8", castToFp8Kernel, gridFor(n), kThreads, 0, stream,
                x, amax, codes, inverseScale, n, format);
}

absl::Status roundToFp8(const float *x, const float *amax, float *out,
                        int64_t n, Fp8Format format, cudaStream_t stream) {
  return launch("roundToFp8", roundToFp8Kernel, gridFor(n), kThreads, 0, stream,
                x, amax, out, n, format);
}

absl::Status castTransposeToFp8(const float *x, const float *amax,
                                uint8_t *codes, float *inverseScale,
                                int64_t rows, int64_t cols, int64_t outLd,
                                Fp8Format format, cudaStream_t stream) {
  if (outLd < rows)
    return absl::InvalidArgumentError(
        "castTransposeToFp8: the output's leading dimension is below the rows");
  return launch("castTransposeToFp8", castTransposeToFp8Kernel,
                gridFor(cols * outLd), kThreads, 0, stream, x, amax, codes,
                inverseScale, rows, cols, outLd, format);
}

absl::Status delayedAmax(const float *current, float *history, int64_t length,
                         float *amaxToUse, cudaStream_t stream) {
  return launch("delayedAmax", delayedAmaxKernel, 1, 1, 0, stream, current,
                history, length, amaxToUse);
}

absl::Status rollAmaxHistories(float *histories, int64_t rows, int64_t length,
                               cudaStream_t stream, const StepCheck *check) {
  if (length < 2 || rows == 0)
    return absl::OkStatus();
  return launch("rollAmaxHistories", rollAmaxHistoriesKernel, gridFor(rows),
                kThreads, 0, stream, histories, rows, length, check);
}

} // namespace moe::rt::cuda
