//===- CublasLtTesting.h - matmuls on the virtual GPU, for tests -*- C++ -*-===//
//
// What the cuBLASLt tests share: matrices held on the host in their stored
// encoding (column-major, with leading dimension and batch stride, the
// bytes between elements poisoned), copied to and from device memory, and
// one matmul run end to end (descriptors, heuristic, cublasLtMatmul on the
// default stream) against the virtual GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_UNITTESTS_VIRTUALGPU_CUBLASLTTESTING_H
#define MOE_UNITTESTS_VIRTUALGPU_CUBLASLTTESTING_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <vector>

namespace moe::rt::virtual_gpu::testing {

size_t bytesOf(cudaDataType_t type);
/// The value of `value` rounded into `type` (FP8 saturating).
float roundTo(cudaDataType_t type, float value);

/// A column-major matrix (a batch of them) in its stored bytes.
struct HostMatrix {
  HostMatrix(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
             int32_t batch = 1, int64_t stride = 0);
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
  /// Every byte of the span, 0xff (NaN for the float types) between the
  /// elements.
  std::vector<uint8_t> bytes;

  uint64_t index(uint64_t row, uint64_t col, int32_t b) const {
    return row + col * static_cast<uint64_t>(ld) +
           static_cast<uint64_t>(b) * static_cast<uint64_t>(stride);
  }
  float at(uint64_t row, uint64_t col, int32_t b = 0) const;
  void set(uint64_t row, uint64_t col, int32_t b, float value);
  /// Every element uniform in [-range, range), rounded to the type.
  void fillRandom(std::mt19937 &rng, float range);
};

/// Device memory from cudaMalloc, freed on destruction.
class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(const void *host, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void *get() const { return data; }
  void read(void *host, size_t bytes) const;

private:
  void *data = nullptr;
};

/// One matmul as cublasLtMatmul states it.
struct MatmulCase {
  bool transA = false, transB = false;
  float alpha = 1.0f, beta = 0.0f;
  cudaDataType_t dType = CUDA_R_32F;
  /// FP8's scale modes and scales (tensor-wide: one each).
  int32_t aScaleMode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t bScaleMode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  std::vector<float> aScales, bScales;
  /// D's scale (FP8 D), and whether to ask for D's amax.
  std::vector<float> dScale;
  bool amax = false;
  uint64_t workspaceBytes = 1 << 20;
};

/// The outcome of runMatmul.
struct MatmulResult {
  cublasStatus_t heuristic = CUBLAS_STATUS_SUCCESS;
  cublasStatus_t matmul = CUBLAS_STATUS_SUCCESS;
  /// D as it came back (only when both succeeded).
  std::vector<uint8_t> d;
  float amax = 0.0f;
};

/// Runs D = alpha op(A) op(B) + beta C with `c` as C and D's initial
/// contents (D's type is `cfg.dType`; in place when it equals C's) through
/// the heuristic's first algorithm, and synchronizes.
MatmulResult runMatmul(cublasLtHandle_t handle, const MatmulCase &cfg,
                       const HostMatrix &a, const HostMatrix &b,
                       const HostMatrix &c);

} // namespace moe::rt::virtual_gpu::testing

#endif // MOE_UNITTESTS_VIRTUALGPU_CUBLASLTTESTING_H
