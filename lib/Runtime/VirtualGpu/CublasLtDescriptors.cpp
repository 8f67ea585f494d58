//===- CublasLtDescriptors.cpp - cuBLASLt handles and descriptors ---------===//
//
// The virtual GPU's cublasLtCreate / Destroy, the status names, and the
// create, destroy, set and get functions of the matrix layout, matmul and
// preference descriptors (their attributes: CublasLtAttributes.cpp). Any
// attribute of the header may be stored and read back, exactly its
// documented size; which values a matmul can run is judged when it is
// asked for (CublasLtProblem.cpp), as cuBLASLt does.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/CublasLt.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

#include <cstdio>
#include <unordered_set>

namespace moe::rt::virtual_gpu::cublaslt {
namespace {

/// The live objects of each kind. Handles are compared, never dereferenced,
/// before they are found here.
struct Registry {
  absl::Mutex mutex;
  std::unordered_set<const void *> live;

  void add(const void *object) {
    absl::MutexLock lock(&mutex);
    live.insert(object);
  }
  bool remove(const void *object) {
    absl::MutexLock lock(&mutex);
    return live.erase(object) == 1;
  }
  bool contains(const void *object) {
    absl::MutexLock lock(&mutex);
    return live.count(object) == 1;
  }
};
Registry &contexts() {
  static Registry *registry = new Registry();
  return *registry;
}
Registry &layouts() {
  static Registry *registry = new Registry();
  return *registry;
}
Registry &matmulDescs() {
  static Registry *registry = new Registry();
  return *registry;
}
Registry &preferences() {
  static Registry *registry = new Registry();
  return *registry;
}

thread_local std::string lastError;

/// Creates a T, registers it and returns it as the opaque handle type H.
template <typename T, typename H> cublasStatus_t create(Registry &registry, H *out, T *object) {
  registry.add(object);
  *out = reinterpret_cast<H>(object);
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T> cublasStatus_t destroy(Registry &registry, const void *handle,
                                             const char *function) {
  // cuBLASLt accepts destroying nothing.
  if (!handle)
    return CUBLAS_STATUS_SUCCESS;
  if (!registry.remove(handle))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  "the descriptor was never created or is already destroyed");
  delete static_cast<const T *>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t setAttribute(Attributes *attributes, int id, const void *buf,
                            size_t size, const char *function) {
  if (!attributes)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  "the descriptor was never created or is already destroyed");
  const Attributes::Known *known = attributes->find(id);
  if (!known)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  absl::StrCat("unknown attribute ", id));
  if (!buf || size != known->size)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  absl::StrCat(known->name, " takes ", known->size,
                               " bytes, given ", buf ? size : 0));
  attributes->set(id, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t getAttribute(const Attributes *attributes, int id, void *buf,
                            size_t size, size_t *written,
                            const char *function) {
  if (!attributes)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  "the descriptor was never created or is already destroyed");
  const Attributes::Known *known = attributes->find(id);
  if (!known)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  absl::StrCat("unknown attribute ", id));
  if (size == 0) {
    if (!written)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                    "a size query needs sizeWritten");
    *written = known->size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf || size != known->size)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, function,
                  absl::StrCat(known->name, " has ", known->size,
                               " bytes, buffer of ", buf ? size : 0));
  attributes->get(id, buf);
  if (written)
    *written = known->size;
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace

cublasStatus_t refuse(cublasStatus_t status, const char *function,
                      const std::string &message) {
  lastError = absl::StrCat(function, ": ", message);
  std::fprintf(stderr, "virtual gpu: %s\n", lastError.c_str());
  return status;
}

const std::string &lastCublasLtError() { return lastError; }

Context *findContext(cublasLtHandle_t handle) {
  return contexts().contains(handle) ? reinterpret_cast<Context *>(handle)
                                     : nullptr;
}
Layout *findLayout(cublasLtMatrixLayout_t layout) {
  return layouts().contains(layout) ? reinterpret_cast<Layout *>(layout)
                                    : nullptr;
}
MatmulDesc *findMatmulDesc(cublasLtMatmulDesc_t desc) {
  return matmulDescs().contains(desc) ? reinterpret_cast<MatmulDesc *>(desc)
                                      : nullptr;
}
Preference *findPreference(cublasLtMatmulPreference_t preference) {
  return preferences().contains(preference)
             ? reinterpret_cast<Preference *>(preference)
             : nullptr;
}

} // namespace moe::rt::virtual_gpu::cublaslt

using namespace moe::rt::virtual_gpu;
using namespace moe::rt::virtual_gpu::cublaslt;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
  if (!handle)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate",
                  "lightHandle is null");
  // cuBLASLt binds its context to the current device; without one the
  // CUDA runtime cannot initialize.
  const DeviceModel *device = selectedDevice();
  if (!device)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtCreate",
                  "no CUDA device (select a virtual gpu: " +
                      knownDeviceModels() + ")");
  auto *context = new Context();
  context->device = device;
  return create(contexts(), handle, context);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle || !contexts().remove(handle))
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy",
                  "the handle was never created or is already destroyed");
  delete reinterpret_cast<Context *>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
#define MOE_STATUS(name)                                                       \
  case name:                                                                   \
    return #name;
    MOE_STATUS(CUBLAS_STATUS_SUCCESS)
    MOE_STATUS(CUBLAS_STATUS_NOT_INITIALIZED)
    MOE_STATUS(CUBLAS_STATUS_ALLOC_FAILED)
    MOE_STATUS(CUBLAS_STATUS_INVALID_VALUE)
    MOE_STATUS(CUBLAS_STATUS_ARCH_MISMATCH)
    MOE_STATUS(CUBLAS_STATUS_MAPPING_ERROR)
    MOE_STATUS(CUBLAS_STATUS_EXECUTION_FAILED)
    MOE_STATUS(CUBLAS_STATUS_INTERNAL_ERROR)
    MOE_STATUS(CUBLAS_STATUS_NOT_SUPPORTED)
    MOE_STATUS(CUBLAS_STATUS_LICENSE_ERROR)
#undef MOE_STATUS
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "the operation completed successfully";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an invalid value was used as an argument";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "the device does not support the operation";
  case CUBLAS_STATUS_MAPPING_ERROR:
    return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "the GPU program failed to execute";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "the functionality requested is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR:
    return "the functionality requested requires a license";
  }
  return "unknown cuBLAS status";
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout,
                                          cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!layout)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate",
                  "matLayout is null");
  auto *object = new Layout();
  uint32_t typeValue = static_cast<uint32_t>(type);
  object->attributes.set(CUBLASLT_MATRIX_LAYOUT_TYPE, &typeValue,
                         sizeof(typeValue));
  object->attributes.set(CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows));
  object->attributes.set(CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols));
  object->attributes.set(CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld));
  return create(layouts(), layout, object);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return destroy<Layout>(layouts(), layout, "cublasLtMatrixLayoutDestroy");
}

cublasStatus_t
cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                 cublasLtMatrixLayoutAttribute_t attribute,
                                 const void *buf, size_t size) {
  Layout *object = findLayout(layout);
  return setAttribute(object ? &object->attributes : nullptr, attribute, buf,
                      size, "cublasLtMatrixLayoutSetAttribute");
}

cublasStatus_t
cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                 cublasLtMatrixLayoutAttribute_t attribute,
                                 void *buf, size_t size, size_t *written) {
  Layout *object = findLayout(layout);
  return getAttribute(object ? &object->attributes : nullptr, attribute, buf,
                      size, written, "cublasLtMatrixLayoutGetAttribute");
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!desc)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate",
                  "matmulDesc is null");
  auto *object = new MatmulDesc();
  int32_t compute = computeType, scale = scaleType;
  object->attributes.set(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute,
                         sizeof(compute));
  object->attributes.set(CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale,
                         sizeof(scale));
  return create(matmulDescs(), desc, object);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return destroy<MatmulDesc>(matmulDescs(), desc, "cublasLtMatmulDescDestroy");
}

cublasStatus_t
cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                               cublasLtMatmulDescAttributes_t attribute,
                               const void *buf, size_t size) {
  MatmulDesc *object = findMatmulDesc(desc);
  return setAttribute(object ? &object->attributes : nullptr, attribute, buf,
                      size, "cublasLtMatmulDescSetAttribute");
}

cublasStatus_t
cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                               cublasLtMatmulDescAttributes_t attribute,
                               void *buf, size_t size, size_t *written) {
  MatmulDesc *object = findMatmulDesc(desc);
  return getAttribute(object ? &object->attributes : nullptr, attribute, buf,
                      size, written, "cublasLtMatmulDescGetAttribute");
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  if (!pref)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate",
                  "pref is null");
  return create(preferences(), pref, new Preference());
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return destroy<Preference>(preferences(), pref,
                             "cublasLtMatmulPreferenceDestroy");
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref,
    cublasLtMatmulPreferenceAttributes_t attribute, const void *buf,
    size_t size) {
  Preference *object = findPreference(pref);
  return setAttribute(object ? &object->attributes : nullptr, attribute, buf,
                      size, "cublasLtMatmulPreferenceSetAttribute");
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(
    cublasLtMatmulPreference_t pref,
    cublasLtMatmulPreferenceAttributes_t attribute, void *buf, size_t size,
    size_t *written) {
  Preference *object = findPreference(pref);
  return getAttribute(object ? &object->attributes : nullptr, attribute, buf,
                      size, written, "cublasLtMatmulPreferenceGetAttribute");
}

} // extern "C"
