//===- CublasLtCompute.cpp - a cuBLASLt matmul, computed on the CPU -------===//
//
// The arithmetic of cublasLtMatmul on a stream's worker, deterministic and
// with the precision cuBLASLt documents for CUBLAS_COMPUTE_32F:
//
//   D = scaleD (alpha scaleA scaleB op(A) op(B) + beta C), amaxD = max |D|
//   before scaleD.
//
// Inputs are decoded exactly (BF16, FP16, FP8 have fp32 values). Products
// are summed in fp32 in k order: products of 8- and 16-bit inputs are
// exact in fp32, so each step rounds once, as a tensor core's fp32
// accumulator does; fp32 inputs multiply-add with one rounding (fma), as
// FFMA. A sum is not reassociated beyond what the algorithm says:
//   * Sequential: one sum over k; with block scales one sum per 128-k
//     block, each scaled by its A and B scales and added in order to the
//     fp32 total (the promotion of Hopper's block-scaled kernels).
//   * SplitK: the same over k's two halves (split at a multiple of 16, or
//     of 128 with block scales), each half's sum written to the workspace;
//     then the halves are added, first plus second.
// Columns of D are spread over threads, each element computed by one of
// them in that order, so the result does not depend on the threads.
// Then v = alpha (scaleA scaleB sum) (+ beta C, when beta is not zero: C is
// then not read, so its contents, even NaN, do not matter), each operation
// rounding to fp32. D stores v rounded to nearest even: BF16 and FP16 as
// IEEE conversions do (overflow to infinity), FP8 after scaleD with
// saturation to the largest finite value (cuBLASLt's satfinite conversion).
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/CublasLt.h"

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/IO/Float16.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

namespace moe::rt::virtual_gpu::cublaslt {
namespace {

float decode(cudaDataType_t type, const void *base, uint64_t index) {
  switch (type) {
  case CUDA_R_32F: {
    float value;
    std::memcpy(&value, static_cast<const char *>(base) + 4 * index, 4);
    return value;
  }
  case CUDA_R_16BF:
  case CUDA_R_16F: {
    uint16_t bits;
    std::memcpy(&bits, static_cast<const char *>(base) + 2 * index, 2);
    return type == CUDA_R_16BF ? io::bf16ToFloat(bits) : io::f16ToFloat(bits);
  }
  case CUDA_R_8F_E4M3:
    return cpu::decodeFp8(static_cast<const uint8_t *>(base)[index],
                          cpu::Fp8Format::E4M3);
  case CUDA_R_8F_E5M2:
    return cpu::decodeFp8(static_cast<const uint8_t *>(base)[index],
                          cpu::Fp8Format::E5M2);
  default:
    return NAN;
  }
}

void encode(cudaDataType_t type, void *base, uint64_t index, float value) {
  switch (type) {
  case CUDA_R_32F:
    std::memcpy(static_cast<char *>(base) + 4 * index, &value, 4);
    return;
  case CUDA_R_16BF:
  case CUDA_R_16F: {
    uint16_t bits =
        type == CUDA_R_16BF ? io::floatToBf16(value) : io::floatToF16(value);
    std::memcpy(static_cast<char *>(base) + 2 * index, &bits, 2);
    return;
  }
  case CUDA_R_8F_E4M3:
  case CUDA_R_8F_E5M2:
    static_cast<uint8_t *>(base)[index] = cpu::encodeFp8(
        value,
        type == CUDA_R_8F_E4M3 ? cpu::Fp8Format::E4M3 : cpu::Fp8Format::E5M2,
        /*saturate=*/true);
    return;
  default:
    return;
  }
}

/// The element offset of (row, col) of batch `b`.
uint64_t offset(const Matrix &m, uint64_t row, uint64_t col, int32_t b) {
  return row + col * static_cast<uint64_t>(m.ld) +
         static_cast<uint64_t>(b) * static_cast<uint64_t>(m.stride);
}

/// Where k splits for SplitK: half of k rounded down to the granule the
/// scales and tensor cores work in; 0 where k is too short to split.
uint64_t splitPoint(const Problem &p) {
  uint64_t granule = p.aScaleMode != ScaleMode::Scalar ? 128 : 16;
  return p.k / 2 / granule * granule;
}

/// The operands of one batch, decoded: op(A) by rows and op(B) by columns,
/// each k long, and the scales of each (row, k block).
struct Panels {
  std::vector<float> a, b;
};

Panels decodePanels(const Problem &p, int32_t batch) {
  Panels panels;
  panels.a.resize(p.m * p.k);
  panels.b.resize(p.n * p.k);
  for (uint64_t i = 0; i < p.m; ++i)
    for (uint64_t kk = 0; kk < p.k; ++kk)
      panels.a[i * p.k + kk] =
          decode(p.a.type, p.a.data,
                 p.transA ? offset(p.a, kk, i, batch) : offset(p.a, i, kk, batch));
  for (uint64_t j = 0; j < p.n; ++j)
    for (uint64_t kk = 0; kk < p.k; ++kk)
      panels.b[j * p.k + kk] =
          decode(p.b.type, p.b.data,
                 p.transB ? offset(p.b, j, kk, batch) : offset(p.b, kk, j, batch));
  return panels;
}

/// The scale of row `outer` of an input in k block `kBlock`.
float scaleOf(ScaleMode mode, const float *scales, uint64_t outerSize,
              uint64_t k, uint64_t outer, uint64_t kBlock) {
  if (!scales)
    return 1.0f;
  return scales[scaleIndex(mode, outerSize, k, outer, kBlock)];
}

/// The fp32 sum of op(A)[i, k0:k1) op(B)[k0:k1, j], block-scaled where the
/// problem is (k0 is then a multiple of 128).
float dot(const Problem &p, const Panels &panels, uint64_t i, uint64_t j,
          uint64_t k0, uint64_t k1) {
  const float *a = &panels.a[i * p.k], *b = &panels.b[j * p.k];
  bool fp32 = p.a.type == CUDA_R_32F;
  auto sum = [&](uint64_t from, uint64_t to) {
    float acc = 0.0f;
    for (uint64_t kk = from; kk < to; ++kk)
      acc = fp32 ? std::fma(a[kk], b[kk], acc) : acc + a[kk] * b[kk];
    return acc;
  };
  if (p.aScaleMode == ScaleMode::Scalar)
    return sum(k0, k1);
  float total = 0.0f;
  for (uint64_t from = k0; from < k1; from += 128) {
    uint64_t to = from + 128 < k1 ? from + 128 : k1;
    uint64_t kBlock = from / 128;
    float scale = scaleOf(p.aScaleMode, p.aScale, p.m, p.k, i, kBlock) *
                  scaleOf(p.bScaleMode, p.bScale, p.n, p.k, j, kBlock);
    total += sum(from, to) * scale;
  }
  return total;
}

/// Runs body(j, amax) for every column j of D, the columns split into
/// contiguous runs over up to one thread per core (a run is at least 2^20
/// multiply-adds). Each run keeps its own amax, appended to `amaxes`.
template <typename Body>
void forColumns(const Problem &p, Body body, std::vector<float> &amaxes) {
  uint64_t perColumn = p.m * p.k + 1;
  uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
  uint64_t threads =
      std::min<uint64_t>({cores, p.n, (perColumn * p.n >> 20) + 1});
  size_t first = amaxes.size();
  amaxes.resize(first + threads, 0.0f);
  auto run = [&](uint64_t t) {
    for (uint64_t j = p.n * t / threads; j < p.n * (t + 1) / threads; ++j)
      body(j, amaxes[first + t]);
  };
  std::vector<std::thread> workers;
  for (uint64_t t = 1; t < threads; ++t)
    workers.emplace_back(run, t);
  run(0);
  for (std::thread &worker : workers)
    worker.join();
}

} // namespace

bool algorithmApplies(Algorithm algorithm, const Problem &problem) {
  switch (algorithm) {
  case Algorithm::Sequential:
    return true;
  case Algorithm::SplitK:
    return splitPoint(problem) > 0;
  }
  return false;
}

uint64_t algorithmWorkspace(Algorithm algorithm, const Problem &problem) {
  return algorithm == Algorithm::SplitK ? 2 * problem.m * problem.n * 4 : 0;
}

void computeMatmul(const Problem &p, Algorithm algorithm, const float *alphaAt,
                   const float *betaAt, float alpha, float beta,
                   void *workspace) {
  auto check = [&](const void *at, uint64_t bytes, const char *what) {
    absl::Status status = checkDeviceRange(at, bytes, what);
    if (!status.ok())
      fault(cudaErrorIllegalAddress,
            absl::StrCat("cublasLtMatmul: ", status.message()));
    return status.ok();
  };
  if (p.devicePointers) {
    if (!check(alphaAt, 4, "alpha") || !check(betaAt, 4, "beta"))
      return;
    alpha = *alphaAt;
    beta = *betaAt;
  }
  uint64_t workspaceBytes = algorithmWorkspace(algorithm, p);
  bool readC = beta != 0.0f;
  if (!check(p.a.data, p.a.spanBytes(), "A") ||
      !check(p.b.data, p.b.spanBytes(), "B") ||
      (readC && !check(p.c.data, p.c.spanBytes(), "C")) ||
      !check(p.d.data, p.d.spanBytes(), "D") ||
      (p.aScale && !check(p.aScale, 4 * scaleCount(p.aScaleMode, p.m, p.k),
                          "A's scales")) ||
      (p.bScale && !check(p.bScale, 4 * scaleCount(p.bScaleMode, p.n, p.k),
                          "B's scales")) ||
      (p.dScale && !check(p.dScale, 4, "D's scale")) ||
      (p.amaxD && !check(p.amaxD, 4, "D's amax")) ||
      (workspaceBytes && !check(workspace, workspaceBytes, "the workspace")))
    return;

  // Tensor-wide scales multiply the sums; block scales are inside them.
  float abScale = 1.0f;
  if (p.aScaleMode == ScaleMode::Scalar)
    abScale = (p.aScale ? *p.aScale : 1.0f) * (p.bScale ? *p.bScale : 1.0f);
  float dScale = p.dScale ? *p.dScale : 1.0f;
  bool fp8Output = p.d.type == CUDA_R_8F_E4M3 || p.d.type == CUDA_R_8F_E5M2;
  uint64_t split = splitPoint(p);
  float *halves = static_cast<float *>(workspace);
  // Each column of D is one thread's, computed as above; only the
  // (order-free) maximum is combined across threads.
  std::vector<float> amaxes;
  for (int32_t batch = 0; batch < p.batch; ++batch) {
    Panels panels = decodePanels(p, batch);
    if (algorithm == Algorithm::SplitK)
      forColumns(p, [&](uint64_t j, float &) {
        for (uint64_t half = 0; half < 2; ++half)
          for (uint64_t i = 0; i < p.m; ++i)
            halves[(half * p.n + j) * p.m + i] =
                half == 0 ? dot(p, panels, i, j, 0, split)
                          : dot(p, panels, i, j, split, p.k);
      }, amaxes);
    forColumns(p, [&](uint64_t j, float &amax) {
      for (uint64_t i = 0; i < p.m; ++i) {
        float sum = algorithm == Algorithm::SplitK
                        ? halves[j * p.m + i] + halves[(p.n + j) * p.m + i]
                        : dot(p, panels, i, j, 0, p.k);
        float value = alpha * (abScale * sum);
        if (readC)
          value = value + beta * decode(p.c.type, p.c.data,
                                        offset(p.c, i, j, batch));
        amax = std::isnan(value) || std::isnan(amax)
                   ? NAN
                   : std::fmax(amax, std::fabs(value));
        encode(p.d.type, const_cast<void *>(p.d.data),
               offset(p.d, i, j, batch), fp8Output ? value * dScale : value);
      }
    }, amaxes);
  }
  float amax = 0.0f;
  for (float part : amaxes)
    amax = std::isnan(part) || std::isnan(amax) ? NAN : std::fmax(amax, part);
  if (p.amaxD)
    *p.amaxD = amax;
}

} // namespace moe::rt::virtual_gpu::cublaslt
