//===- Gemm.h - GEMMs through cuBLASLt --------------------------*- C++ -*-===//
//
// The CUDA backend's GEMMs, stated as the CPU kernels state them: row-major
// C[m, n] = alpha * op(A)[m, k] op(B)[k, n] + beta * C, fp32 out, fp32
// accumulation. cuBLASLt is column-major, so a GEMM runs as C^T = op(B)^T
// op(A)^T: B is its first matrix and A its second (gemmLayouts).
//
// Inputs are BF16 or FP8. FP8 needs tensor cores that read it (sm_89+); on
// the A100 (sm_80) a requested FP8 GEMM runs in BF16 on the FP8 values
// (effectiveInput): FP8 is then a storage and communication format only.
// cuBLASLt's FP8 GEMMs take A transposed and B not in its column-major
// terms, which in ours is op(A) = A and op(B) = B^T, i.e. x W^T with W
// [out, in] as stored (validateGemm); the backward GEMMs transpose their
// FP8 operands first. The dequantization scales are device pointers to one
// fp32 each, set per call.
//
// Descriptors are plain host objects: cuBLASLt builds them without a
// device, so their construction is unit-tested on any machine. Running a
// GEMM needs a device and a handle (GemmRunner).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CUDA_GEMM_H
#define MOE_RUNTIME_CUDA_GEMM_H

#include "moe/Runtime/Cuda/GemmScaling.h"
#include "moe/Runtime/Cuda/Workspace.h"

#include "absl/status/statusor.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

namespace moe::rt::cuda {

/// The element type of a GEMM input.
enum class GemmInput : uint8_t { BF16 = 0, E4M3 = 1, E5M2 = 2 };

const char *gemmInputName(GemmInput input);

/// The element type of C (and D = C): fp32, or BF16 where the consumer
/// reads BF16 (cuBLASLt rounds the fp32 sums once, to nearest even, as the
/// CPU's BF16 GEMMs round their results).
enum class GemmOutput : uint8_t { F32 = 0, BF16 = 1 };

/// One GEMM (or a strided batch of them), row-major as above.
struct GemmSpec {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  /// Leading dimensions (row strides) of A, B and C as stored.
  int64_t lda = 0, ldb = 0, ldc = 0;
  /// A strided batch: `batch` GEMMs, each operand `stride*` elements after
  /// the previous one.
  int32_t batch = 1;
  int64_t strideA = 0, strideB = 0, strideC = 0;
  GemmInput a = GemmInput::BF16, b = GemmInput::BF16;
  GemmOutput c = GemmOutput::F32;
  /// FP8 inputs: how their scales apply (op(A) = A's rows are its rows,
  /// B's are the rows of B as stored, [n, k]).
  GemmScaling aScaling = GemmScaling::Tensor, bScaling = GemmScaling::Tensor;

  auto key() const {
    return std::make_tuple(transA, transB, m, n, k, lda, ldb, ldc, batch,
                           strideA, strideB, strideC, a, b, c, aScaling,
                           bScaling);
  }
  bool operator<(const GemmSpec &other) const { return key() < other.key(); }
  bool operator==(const GemmSpec &other) const { return key() == other.key(); }
};

/// What a device of `computeCapability` reads for a requested input: FP8
/// below sm_89 becomes BF16.
GemmInput effectiveInput(GemmInput requested, int computeCapability);

/// Checks what cuBLASLt would refuse, naming the problem: sizes, leading
/// dimensions, and FP8's layout (op(A) = A, op(B) = B^T), its k and leading
/// dimensions (multiples of 16) and its types (not both E5M2); block
/// scaling only on FP8 inputs, E4M3 both, one batch, A by rows and B by
/// rows or squares, m and n multiples of 4.
absl::Status validateGemm(const GemmSpec &spec);

/// A matrix as cuBLASLt sees it: column-major rows x cols with `ld`.
struct ColumnMajor {
  int64_t rows = 0, cols = 0, ld = 0;
};
/// The column-major shapes of cuBLASLt's first matrix (our B), its second
/// (our A) and of C, and whether the first two are transposed.
struct GemmLayouts {
  ColumnMajor first, second, c;
  bool transFirst = false, transSecond = false;
};
GemmLayouts gemmLayouts(const GemmSpec &spec);

/// The cuBLASLt descriptors of one GEMM: the operation and the layouts of
/// its first and second matrix, C and D (= C). Owns them.
class GemmDescriptors {
public:
  /// Builds the descriptors of `spec` (validated) as a device of
  /// `computeCapability` runs it (effectiveInput).
  static absl::StatusOr<std::unique_ptr<GemmDescriptors>>
  create(const GemmSpec &spec, int computeCapability);
  ~GemmDescriptors();
  GemmDescriptors(const GemmDescriptors &) = delete;
  GemmDescriptors &operator=(const GemmDescriptors &) = delete;

  const GemmSpec &spec() const { return spec_; }
  /// Whether it reads FP8 (and takes scales).
  bool fp8() const { return fp8_; }
  cublasLtMatmulDesc_t operation() const { return operation_; }
  cublasLtMatrixLayout_t first() const { return first_; }
  cublasLtMatrixLayout_t second() const { return second_; }
  cublasLtMatrixLayout_t c() const { return c_; }

  /// FP8: the device pointers of A's and B's dequantization scales (fp32:
  /// the stored value times its block's is the real one; one per input, or
  /// gemmScaleCount of them in block scaling).
  absl::Status setScales(const float *aScale, const float *bScale);

private:
  GemmDescriptors() = default;
  GemmSpec spec_;
  bool fp8_ = false;
  cublasLtMatmulDesc_t operation_ = nullptr;
  cublasLtMatrixLayout_t first_ = nullptr, second_ = nullptr, c_ = nullptr;
};

/// Runs GEMMs on a device: one cuBLASLt handle, a workspace, and per shape
/// the descriptors and the algorithm cuBLASLt's heuristic chose, found once.
class GemmRunner {
public:
  static absl::StatusOr<std::unique_ptr<GemmRunner>>
  create(int computeCapability, uint64_t workspaceBytes = kGemmWorkspaceBytes);
  ~GemmRunner();

  /// C = alpha op(A) op(B) + beta C on `stream`; A and B of spec.a / spec.b
  /// as effectiveInput says (BF16 for FP8 on sm_80), C of spec.c. FP8
  /// inputs need their scales.
  absl::Status run(const GemmSpec &spec, float alpha, const void *a,
                   const void *b, float beta, void *c, cudaStream_t stream,
                   const float *aScale = nullptr, const float *bScale = nullptr);

  /// Shapes planned so far.
  size_t plannedShapes() const { return plans.size(); }
  /// The device's compute capability (80, 90, ...).
  int deviceCapability() const { return computeCapability; }

private:
  struct Plan;
  GemmRunner() = default;
  /// The plan of `spec` with operands aligned to `alignment` bytes (the
  /// heuristic's algorithms may assume it).
  absl::StatusOr<Plan *> plan(const GemmSpec &spec, uint32_t alignment);

  int computeCapability = 0;
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  uint64_t workspaceBytes = 0;
  std::map<std::pair<GemmSpec, uint32_t>, std::unique_ptr<Plan>> plans;
};

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_CUDA_GEMM_H
