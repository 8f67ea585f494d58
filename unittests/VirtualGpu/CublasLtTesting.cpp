//===- CublasLtTesting.cpp - matmuls on the virtual GPU, for tests --------===//
#include "CublasLtTesting.h"

#include "moe/Runtime/Cpu/Fp8.h"
#include "moe/Runtime/IO/Float16.h"

#include "gtest/gtest.h"

#include <cstring>
#include <memory>

namespace moe::rt::virtual_gpu::testing {

size_t bytesOf(cudaDataType_t type) {
  switch (type) {
  case CUDA_R_32F:
    return 4;
  case CUDA_R_16BF:
  case CUDA_R_16F:
    return 2;
  default:
    return 1;
  }
}

namespace {

cpu::Fp8Format fp8Format(cudaDataType_t type) {
  return type == CUDA_R_8F_E4M3 ? cpu::Fp8Format::E4M3 : cpu::Fp8Format::E5M2;
}

/// A layout's descriptor, destroyed with it.
struct LayoutHandle {
  cublasLtMatrixLayout_t layout = nullptr;
  LayoutHandle(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
               int32_t batch, int64_t stride) {
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld),
              CUBLAS_STATUS_SUCCESS);
    if (batch > 1) {
      EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(
                    layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                    sizeof(batch)),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(
                    layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                    &stride, sizeof(stride)),
                CUBLAS_STATUS_SUCCESS);
    }
  }
  explicit LayoutHandle(const HostMatrix &m)
      : LayoutHandle(m.type, m.rows, m.cols, m.ld, m.batch, m.stride) {}
  ~LayoutHandle() { cublasLtMatrixLayoutDestroy(layout); }
};

} // namespace

float roundTo(cudaDataType_t type, float value) {
  switch (type) {
  case CUDA_R_32F:
    return value;
  case CUDA_R_16BF:
    return io::bf16ToFloat(io::floatToBf16(value));
  case CUDA_R_16F:
    return io::f16ToFloat(io::floatToF16(value));
  default:
    return cpu::roundToFp8(value, fp8Format(type));
  }
}

HostMatrix::HostMatrix(cudaDataType_t type, uint64_t rows, uint64_t cols,
                       int64_t ld, int32_t batch, int64_t stride)
    : type(type), rows(rows), cols(cols), ld(ld), batch(batch), stride(stride) {
  uint64_t last = index(rows - 1, cols - 1, batch - 1);
  bytes.assign((last + 1) * bytesOf(type), 0xff);
}

float HostMatrix::at(uint64_t row, uint64_t col, int32_t b) const {
  uint64_t i = index(row, col, b);
  const uint8_t *p = bytes.data() + i * bytesOf(type);
  switch (type) {
  case CUDA_R_32F: {
    float value;
    std::memcpy(&value, p, 4);
    return value;
  }
  case CUDA_R_16BF:
  case CUDA_R_16F: {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return type == CUDA_R_16BF ? io::bf16ToFloat(bits) : io::f16ToFloat(bits);
  }
  default:
    return cpu::decodeFp8(*p, fp8Format(type));
  }
}

void HostMatrix::set(uint64_t row, uint64_t col, int32_t b, float value) {
  uint8_t *p = bytes.data() + index(row, col, b) * bytesOf(type);
  switch (type) {
  case CUDA_R_32F:
    std::memcpy(p, &value, 4);
    return;
  case CUDA_R_16BF:
  case CUDA_R_16F: {
    uint16_t bits =
        type == CUDA_R_16BF ? io::floatToBf16(value) : io::floatToF16(value);
    std::memcpy(p, &bits, 2);
    return;
  }
  default:
    *p = cpu::encodeFp8(value, fp8Format(type));
  }
}

void HostMatrix::fillRandom(std::mt19937 &rng, float range) {
  std::uniform_real_distribution<float> uniform(-range, range);
  for (int32_t b = 0; b < batch; ++b)
    for (uint64_t col = 0; col < cols; ++col)
      for (uint64_t row = 0; row < rows; ++row)
        set(row, col, b, uniform(rng));
}

DeviceBuffer::DeviceBuffer(size_t bytes) {
  EXPECT_EQ(cudaMalloc(&data, bytes), cudaSuccess);
}

DeviceBuffer::DeviceBuffer(const void *host, size_t bytes)
    : DeviceBuffer(bytes) {
  EXPECT_EQ(cudaMemcpy(data, host, bytes, cudaMemcpyHostToDevice),
            cudaSuccess);
}

DeviceBuffer::~DeviceBuffer() {
  if (data)
    cudaFree(data);
}

void DeviceBuffer::read(void *host, size_t bytes) const {
  EXPECT_EQ(cudaMemcpy(host, data, bytes, cudaMemcpyDeviceToHost),
            cudaSuccess);
}

MatmulResult runMatmul(cublasLtHandle_t handle, const MatmulCase &cfg,
                       const HostMatrix &a, const HostMatrix &b,
                       const HostMatrix &c) {
  MatmulResult result;
  cublasLtMatmulDesc_t op = nullptr;
  EXPECT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  std::unique_ptr<cublasLtMatmulDescOpaque_t, cublasStatus_t (*)(cublasLtMatmulDesc_t)>
      owner(op, cublasLtMatmulDescDestroy);
  auto set = [&](cublasLtMatmulDescAttributes_t attribute, const auto &value) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, attribute, &value,
                                             sizeof(value)),
              CUBLAS_STATUS_SUCCESS);
  };
  int32_t transA = cfg.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  int32_t transB = cfg.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  set(CUBLASLT_MATMUL_DESC_TRANSA, transA);
  set(CUBLASLT_MATMUL_DESC_TRANSB, transB);
  std::unique_ptr<DeviceBuffer> aScales, bScales, dScale, amax;
  auto scales = [&](const std::vector<float> &values,
                    cublasLtMatmulDescAttributes_t attribute,
                    std::unique_ptr<DeviceBuffer> &buffer) {
    if (values.empty())
      return;
    buffer = std::make_unique<DeviceBuffer>(values.data(), 4 * values.size());
    set(attribute, buffer->get());
  };
  if (cfg.aScaleMode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
      cfg.bScaleMode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, cfg.aScaleMode);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, cfg.bScaleMode);
  }
  scales(cfg.aScales, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, aScales);
  scales(cfg.bScales, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, bScales);
  scales(cfg.dScale, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, dScale);
  if (cfg.amax) {
    float poison = NAN;
    amax = std::make_unique<DeviceBuffer>(&poison, 4);
    set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax->get());
  }

  LayoutHandle aLayout(a), bLayout(b), cLayout(c);
  bool inPlace = cfg.dType == c.type;
  HostMatrix dHost(cfg.dType, c.rows, c.cols, c.ld, c.batch, c.stride);
  LayoutHandle dLayout(dHost);
  DeviceBuffer aData(a.bytes.data(), a.bytes.size());
  DeviceBuffer bData(b.bytes.data(), b.bytes.size());
  DeviceBuffer cData(c.bytes.data(), c.bytes.size());
  std::unique_ptr<DeviceBuffer> dData;
  if (!inPlace)
    dData = std::make_unique<DeviceBuffer>(dHost.bytes.data(), dHost.bytes.size());
  void *d = inPlace ? cData.get() : dData->get();

  cublasLtMatmulPreference_t preference = nullptr;
  EXPECT_EQ(cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(
                preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &cfg.workspaceBytes, sizeof(cfg.workspaceBytes)),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int returned = 0;
  result.heuristic = cublasLtMatmulAlgoGetHeuristic(
      handle, op, aLayout.layout, bLayout.layout, cLayout.layout,
      dLayout.layout, preference, 1, &heuristic, &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  if (result.heuristic != CUBLAS_STATUS_SUCCESS)
    return result;
  EXPECT_EQ(returned, 1);
  DeviceBuffer workspace(cfg.workspaceBytes ? cfg.workspaceBytes : 1);
  result.matmul = cublasLtMatmul(handle, op, &cfg.alpha, aData.get(),
                                 aLayout.layout, bData.get(), bLayout.layout,
                                 &cfg.beta, cData.get(), cLayout.layout, d,
                                 dLayout.layout, &heuristic.algo,
                                 workspace.get(), cfg.workspaceBytes, nullptr);
  if (result.matmul != CUBLAS_STATUS_SUCCESS)
    return result;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  result.d.resize(dHost.bytes.size());
  (inPlace ? cData : *dData).read(result.d.data(), result.d.size());
  if (amax)
    amax->read(&result.amax, 4);
  return result;
}

} // namespace moe::rt::virtual_gpu::testing
