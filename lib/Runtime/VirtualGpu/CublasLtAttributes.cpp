//===- CublasLtAttributes.cpp - cuBLASLt descriptors' attributes ----------===//
//
// The attributes of cuBLASLt's matrix layout, matmul and preference
// descriptors as cublasLt.h documents them: each one's type (its size and
// sign) and default, and the values a descriptor holds.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/CublasLt.h"

#include <cstring>
#include <iterator>

namespace moe::rt::virtual_gpu::cublaslt {
namespace {

using Known = Attributes::Known;

#define MOE_ATTRIBUTE(prefix, name, type, defaultValue)                       \
  Known {                                                                      \
    prefix##name, #prefix #name, sizeof(type), static_cast<type>(-1) < 0,      \
        static_cast<int64_t>(defaultValue)                                     \
  }

// cublasLtMatrixLayoutAttribute_t. TYPE, ROWS, COLS and LD are set by
// cublasLtMatrixLayoutCreate.
#define MOE_LAYOUT(name, type, value)                                          \
  MOE_ATTRIBUTE(CUBLASLT_MATRIX_LAYOUT_, name, type, value)
const Known layoutAttributes[] = {
    MOE_LAYOUT(TYPE, uint32_t, CUDA_R_32F),
    MOE_LAYOUT(ORDER, int32_t, CUBLASLT_ORDER_COL),
    MOE_LAYOUT(ROWS, uint64_t, 0),
    MOE_LAYOUT(COLS, uint64_t, 0),
    MOE_LAYOUT(LD, int64_t, 0),
    MOE_LAYOUT(BATCH_COUNT, int32_t, 1),
    MOE_LAYOUT(STRIDED_BATCH_OFFSET, int64_t, 0),
    MOE_LAYOUT(PLANE_OFFSET, int64_t, 0),
    MOE_LAYOUT(BATCH_MODE, uint32_t, CUBLASLT_BATCH_MODE_STRIDED),
};
#undef MOE_LAYOUT

// cublasLtMatmulDescAttributes_t. COMPUTE_TYPE and SCALE_TYPE are set by
// cublasLtMatmulDescCreate.
#define MOE_DESC(name, type, value)                                            \
  MOE_ATTRIBUTE(CUBLASLT_MATMUL_DESC_, name, type, value)
const Known matmulAttributes[] = {
    MOE_DESC(COMPUTE_TYPE, int32_t, CUBLAS_COMPUTE_32F),
    MOE_DESC(SCALE_TYPE, int32_t, CUDA_R_32F),
    MOE_DESC(POINTER_MODE, int32_t, CUBLASLT_POINTER_MODE_HOST),
    MOE_DESC(TRANSA, int32_t, CUBLAS_OP_N),
    MOE_DESC(TRANSB, int32_t, CUBLAS_OP_N),
    MOE_DESC(TRANSC, int32_t, CUBLAS_OP_N),
    MOE_DESC(FILL_MODE, int32_t, CUBLAS_FILL_MODE_FULL),
    MOE_DESC(EPILOGUE, uint32_t, CUBLASLT_EPILOGUE_DEFAULT),
    MOE_DESC(BIAS_POINTER, intptr_t, 0),
    MOE_DESC(BIAS_BATCH_STRIDE, int64_t, 0),
    MOE_DESC(EPILOGUE_AUX_POINTER, intptr_t, 0),
    MOE_DESC(EPILOGUE_AUX_LD, int64_t, 0),
    MOE_DESC(EPILOGUE_AUX_BATCH_STRIDE, int64_t, 0),
    MOE_DESC(ALPHA_VECTOR_BATCH_STRIDE, int64_t, 0),
    MOE_DESC(SM_COUNT_TARGET, int32_t, 0),
    MOE_DESC(A_SCALE_POINTER, intptr_t, 0),
    MOE_DESC(B_SCALE_POINTER, intptr_t, 0),
    MOE_DESC(C_SCALE_POINTER, intptr_t, 0),
    MOE_DESC(D_SCALE_POINTER, intptr_t, 0),
    MOE_DESC(AMAX_D_POINTER, intptr_t, 0),
    MOE_DESC(EPILOGUE_AUX_DATA_TYPE, int32_t, -1),
    MOE_DESC(EPILOGUE_AUX_SCALE_POINTER, intptr_t, 0),
    MOE_DESC(EPILOGUE_AUX_AMAX_POINTER, intptr_t, 0),
    MOE_DESC(FAST_ACCUM, int8_t, 0),
    MOE_DESC(BIAS_DATA_TYPE, int32_t, -1),
    MOE_DESC(A_SCALE_MODE, int32_t, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F),
    MOE_DESC(B_SCALE_MODE, int32_t, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F),
    MOE_DESC(C_SCALE_MODE, int32_t, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F),
    MOE_DESC(D_SCALE_MODE, int32_t, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F),
    MOE_DESC(EPILOGUE_AUX_SCALE_MODE, int32_t,
             CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F),
    MOE_DESC(D_OUT_SCALE_POINTER, intptr_t, 0),
    MOE_DESC(D_OUT_SCALE_MODE, int32_t, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F),
    MOE_DESC(EMULATION_DESCRIPTOR, intptr_t, 0),
};
#undef MOE_DESC

// cublasLtMatmulPreferenceAttributes_t.
#define MOE_PREF(name, type, value)                                            \
  MOE_ATTRIBUTE(CUBLASLT_MATMUL_PREF_, name, type, value)
const Known preferenceAttributes[] = {
    MOE_PREF(SEARCH_MODE, uint32_t, CUBLASLT_SEARCH_BEST_FIT),
    MOE_PREF(MAX_WORKSPACE_BYTES, uint64_t, 0),
    MOE_PREF(REDUCTION_SCHEME_MASK, uint32_t, CUBLASLT_REDUCTION_SCHEME_MASK),
    MOE_PREF(MIN_ALIGNMENT_A_BYTES, uint32_t, 256),
    MOE_PREF(MIN_ALIGNMENT_B_BYTES, uint32_t, 256),
    MOE_PREF(MIN_ALIGNMENT_C_BYTES, uint32_t, 256),
    MOE_PREF(MIN_ALIGNMENT_D_BYTES, uint32_t, 256),
    // A float in the header; its bits are what is stored.
    Known{CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT,
          "CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT", sizeof(float), false, 0},
    MOE_PREF(IMPL_MASK, uint64_t, ~0ull),
};
#undef MOE_PREF
#undef MOE_ATTRIBUTE

} // namespace

const Known *Attributes::find(int id) const {
  for (size_t i = 0; i < count; ++i)
    if (known[i].id == id)
      return &known[i];
  return nullptr;
}

void Attributes::set(int id, const void *buf, size_t size) {
  uint64_t bits = 0;
  std::memcpy(&bits, buf, size);
  stored[id] = bits;
}

void Attributes::get(int id, void *buf) const {
  const Known *attribute = find(id);
  auto found = stored.find(id);
  uint64_t bits = found != stored.end()
                      ? found->second
                      : static_cast<uint64_t>(attribute->defaultValue);
  std::memcpy(buf, &bits, attribute->size);
}

int64_t Attributes::value(int id) const {
  const Known *attribute = find(id);
  auto found = stored.find(id);
  if (found == stored.end())
    return attribute->defaultValue;
  uint64_t bits = found->second;
  int shift = 64 - static_cast<int>(attribute->size) * 8;
  if (shift == 0)
    return static_cast<int64_t>(bits);
  // Little-endian: the low bytes hold the value.
  return attribute->isSigned
             ? static_cast<int64_t>(bits << shift) >> shift
             : static_cast<int64_t>((bits << shift) >> shift);
}

Layout::Layout() : attributes(layoutAttributes, std::size(layoutAttributes)) {}
MatmulDesc::MatmulDesc()
    : attributes(matmulAttributes, std::size(matmulAttributes)) {}
Preference::Preference()
    : attributes(preferenceAttributes, std::size(preferenceAttributes)) {}


} // namespace moe::rt::virtual_gpu::cublaslt
