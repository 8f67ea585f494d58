//===- CublasLt.h - the virtual GPU's cuBLASLt, shared parts ----*- C++ -*-===//
//
// Private to the cuBLASLt emulation (CublasLtAttributes.cpp,
// CublasLtDescriptors.cpp, CublasLtProblem.cpp, CublasLtMatmul.cpp,
// CublasLtCompute.cpp) and its tests. cuBLASLt's handles and descriptors
// are pointers to opaque structs (cublasLt.h); here each points to one of
// the objects below, created by the Create functions and known to a
// registry until destroyed, so a destroyed or forged descriptor is refused
// instead of read.
//
// Every refusal goes through refuse(): the status the documentation gives,
// and a message naming the function and the thing refused, printed to
// stderr ("virtual gpu: cublasLtMatmul: ...") and kept for the tests
// (lastCublasLtError).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_CUBLASLT_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_CUBLASLT_H

#include "VirtualGpu/Runtime.h"

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <string>

namespace moe::rt::virtual_gpu::cublaslt {

/// Sets the message lastCublasLtError() returns, prints it to stderr as
/// "virtual gpu: <function>: <message>" and returns `status`.
cublasStatus_t refuse(cublasStatus_t status, const char *function,
                      const std::string &message);
/// The message of the last refusal on this thread ("" before any).
const std::string &lastCublasLtError();

/// The attribute values of a descriptor as cublasLt*SetAttribute stored
/// them: each attribute's bytes, exactly its documented size. Attributes
/// never set read as their documented default.
class Attributes {
public:
  /// One attribute the header documents: its name, size and default.
  struct Known {
    int id;
    const char *name;
    size_t size;
    /// int8_t / int32_t / int64_t in the header: widened with its sign.
    bool isSigned;
    int64_t defaultValue;
  };
  explicit Attributes(const Known *known, size_t count)
      : known(known), count(count) {}

  const Known *find(int id) const;
  /// The attributes the header documents, in its order.
  const Known *begin() const { return known; }
  const Known *end() const { return known + count; }
  /// Stores `size` bytes from `buf` (sizes checked by the caller).
  void set(int id, const void *buf, size_t size);
  /// Copies the value (stored or default) to `buf`, which has find(id)->size
  /// bytes.
  void get(int id, void *buf) const;
  /// The value widened to 64 bits (sign-extended for signed attributes of
  /// the header's int32_t / int8_t types; pointers as their address).
  int64_t value(int id) const;
  const void *pointer(int id) const {
    return reinterpret_cast<const void *>(static_cast<intptr_t>(value(id)));
  }
  /// Whether `id` holds something other than its default.
  bool changed(int id) const { return value(id) != find(id)->defaultValue; }

private:
  const Known *known;
  size_t count;
  std::map<int, uint64_t> stored;
};

/// cublasLtHandle_t: a context bound to the device selected when it was
/// created.
struct Context {
  const DeviceModel *device = nullptr;
};

/// cublasLtMatrixLayout_t.
struct Layout {
  Layout();
  Attributes attributes;
};

/// cublasLtMatmulDesc_t.
struct MatmulDesc {
  MatmulDesc();
  Attributes attributes;
};

/// cublasLtMatmulPreference_t.
struct Preference {
  Preference();
  Attributes attributes;
};

/// The live objects behind handles and descriptors; nullptr for a handle
/// that is not one (never created, or destroyed).
Context *findContext(cublasLtHandle_t handle);
Layout *findLayout(cublasLtMatrixLayout_t layout);
MatmulDesc *findMatmulDesc(cublasLtMatmulDesc_t desc);
Preference *findPreference(cublasLtMatmulPreference_t preference);

/// One matrix of a matmul as its layout describes it (column-major).
struct Matrix {
  const void *data = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
  /// Bytes per element.
  size_t elementBytes = 4;
  /// The bytes from `data` that the batch touches.
  uint64_t spanBytes() const;
};

/// How one input's dequantization scales apply.
enum class ScaleMode : uint8_t { Scalar, Vec128, Block128x128 };

/// A matmul as the descriptors state it, resolved and validated: what the
/// heuristic judges and the computation runs. Pointers are those of the
/// call (the heuristic has none but the descriptor's).
struct Problem {
  // D[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, `batch` times.
  uint64_t m = 0, n = 0, k = 0;
  int32_t batch = 1;
  bool transA = false, transB = false;
  Matrix a, b, c, d;
  bool fp8 = false;
  ScaleMode aScaleMode = ScaleMode::Scalar, bScaleMode = ScaleMode::Scalar;
  const float *aScale = nullptr, *bScale = nullptr, *dScale = nullptr;
  float *amaxD = nullptr;
  /// Alpha and beta as device pointers (CUBLASLT_POINTER_MODE_DEVICE).
  bool devicePointers = false;
  /// What decides which algorithms apply: types, transposes, scale modes.
  uint64_t fingerprint = 0;
};

/// The number of fp32 scales an input of `outer` x `k` (op's rows for A,
/// columns for B) reads in `mode`, and where block (row, kBlock) is:
/// Vec128 stores ceil(k / 128) groups of `outer` scales (outer innermost);
/// Block128x128 ceil(outer / 128) rows of ceil(k / 128) scales, the rows
/// padded to a multiple of 4 (16 bytes).
uint64_t scaleCount(ScaleMode mode, uint64_t outer, uint64_t k);
uint64_t scaleIndex(ScaleMode mode, uint64_t outer, uint64_t k, uint64_t row,
                    uint64_t kBlock);

/// Resolves and checks what `desc` and the layouts ask for against the
/// documented requirements and `device` (the handle's), as cublasLtMatmul
/// and the heuristic do. Pointers are the call's (nullptr from the
/// heuristic). On failure returns the status (refuse() called with
/// `function`).
cublasStatus_t resolveProblem(const char *function, const DeviceModel &device,
                              MatmulDesc &desc, cublasLtMatrixLayout_t aDesc,
                              cublasLtMatrixLayout_t bDesc,
                              cublasLtMatrixLayout_t cDesc,
                              cublasLtMatrixLayout_t dDesc, Problem &problem);

/// The algorithms the emulation knows. Both give the documented result;
/// they differ in the order of the fp32 sums (CublasLtCompute.cpp).
enum class Algorithm : uint8_t {
  /// One fp32 sum over k in order (per 128-k block, then scaled and added
  /// in order, for block scaling). Needs no workspace.
  Sequential = 1,
  /// k in two halves summed separately into the workspace, then added:
  /// needs 2 m n fp32 of it. Offered first where it fits, so that callers'
  /// workspaces are used (and their misuse seen).
  SplitK = 2,
};
/// The workspace `algorithm` needs for `problem`, and whether it applies.
bool algorithmApplies(Algorithm algorithm, const Problem &problem);
uint64_t algorithmWorkspace(Algorithm algorithm, const Problem &problem);

/// The smallest alignment (bytes, a power of two up to 16) that an
/// algorithm may assume of a matrix: what its address and every column
/// and batch start share, within what the caller allows.
uint32_t matrixAlignment(const Matrix &matrix, uint32_t allowed);

/// Runs `problem` with `algorithm` on a stream's worker: checks every
/// operand's range first (a bad one faults, as a kernel's access would),
/// then computes (CublasLtCompute.cpp). Alpha and beta are `alpha` and
/// `beta` (host pointer mode, read at the call) or read from `alphaAt` and
/// `betaAt` (device pointer mode).
void computeMatmul(const Problem &problem, Algorithm algorithm,
                   const float *alphaAt, const float *betaAt, float alpha,
                   float beta, void *workspace);

} // namespace moe::rt::virtual_gpu::cublaslt

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_CUBLASLT_H
