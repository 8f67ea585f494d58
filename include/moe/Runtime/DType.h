//===- DType.h - the element types of artifact buffers ----------*- C++ -*-===//
//
// One table of the dtypes a buffer of an artifact can hold: the schema's
// value, the name used in messages (the MLIR element type's spelling), the
// element size and the safetensors name. The runtime sizes buffers, arenas
// and weight files from it and the compiler maps MLIR element types to it,
// so both agree on every byte. Header-only and free of LLVM/MLIR: the
// runtime must not link them.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_DTYPE_H
#define MOE_RUNTIME_DTYPE_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moe::rt {

/// Mirrors moe.artifact.DType (include/moe/Runtime/Artifact/Program.fbs)
/// value for value.
enum class DType : uint8_t {
  F32 = 0,
  I32 = 1,
  BF16 = 2,
  F16 = 3,
  F8E4M3 = 4, // OCP E4M3 (MLIR f8E4M3FN): no infinities, one NaN
  F8E5M2 = 5,
  I64 = 6,
};

struct DTypeInfo {
  DType dtype;
  /// The MLIR element type's spelling ("f32", "f8E4M3FN"): messages of
  /// compiler and runtime name a dtype the same way.
  const char *name;
  uint8_t bytes;
  bool isFloat;
  /// The dtype's name in a safetensors header ("F32", "F8_E4M3").
  const char *safetensors;
};

/// Every dtype, in schema order (kDTypes[i].dtype == DType(i)).
inline constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "f32", 4, true, "F32"},
    {DType::I32, "i32", 4, false, "I32"},
    {DType::BF16, "bf16", 2, true, "BF16"},
    {DType::F16, "f16", 2, true, "F16"},
    {DType::F8E4M3, "f8E4M3FN", 1, true, "F8_E4M3"},
    {DType::F8E5M2, "f8E5M2", 1, true, "F8_E5M2"},
    {DType::I64, "i64", 8, false, "I64"},
};
inline constexpr int kNumDTypes = sizeof(kDTypes) / sizeof(kDTypes[0]);
/// The widest element: arena alignment must be a multiple of it.
inline constexpr uint8_t kMaxDTypeBytes = 8;

/// The table entry of `dtype`, or nullptr for a value no schema version
/// defines (a damaged file; the verifier refuses it).
constexpr const DTypeInfo *dtypeInfo(DType dtype) {
  auto index = static_cast<unsigned>(dtype);
  return index < static_cast<unsigned>(kNumDTypes) ? &kDTypes[index]
                                                   : nullptr;
}

/// Bytes per element of `dtype` (which must be a known one).
constexpr uint64_t dtypeBytes(DType dtype) {
  const DTypeInfo *info = dtypeInfo(dtype);
  return info ? info->bytes : 0;
}

/// "bf16", or "dtype 9" for a value the schema does not define.
inline std::string dtypeName(DType dtype) {
  if (const DTypeInfo *info = dtypeInfo(dtype))
    return info->name;
  return "dtype " + std::to_string(static_cast<int>(dtype));
}

/// "f32, i32, bf16, f16, f8E4M3FN, f8E5M2, i64": for errors that list the
/// known dtypes.
inline std::string knownDTypeNames() {
  std::string names;
  for (const DTypeInfo &info : kDTypes)
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

/// The dtype a safetensors dtype name stands for, if an artifact has it.
inline std::optional<DType> dtypeFromSafetensors(std::string_view name) {
  for (const DTypeInfo &info : kDTypes)
    if (name == info.safetensors)
      return info.dtype;
  return std::nullopt;
}

/// The safetensors name of `dtype` (which must be a known one).
inline const char *safetensorsName(DType dtype) {
  const DTypeInfo *info = dtypeInfo(dtype);
  return info ? info->safetensors : "";
}

namespace detail {
constexpr bool tableInSchemaOrder() {
  for (int i = 0; i < kNumDTypes; ++i)
    if (static_cast<int>(kDTypes[i].dtype) != i ||
        kDTypes[i].bytes > kMaxDTypeBytes)
      return false;
  return true;
}
} // namespace detail
static_assert(detail::tableInSchemaOrder(),
              "kDTypes must list the dtypes in schema order");

} // namespace moe::rt

#endif // MOE_RUNTIME_DTYPE_H
