//===- TransformerLimits.h - the largest moe.transformer --------*- C++ -*-===//
//
// The largest model moe.transformer accepts (MoEOps.td, "Constraints"):
// beyond any model trained so far, yet small enough that every count the
// compiler derives (parameters, elements and bytes of a tensor, FLOPs)
// stays far inside int64. Each maximum is a power of two. The verifier
// checks them; moe-import checks a config's fields against them first, so
// that its errors name the config's fields.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_DIALECT_MOE_IR_TRANSFORMERLIMITS_H
#define MOE_DIALECT_MOE_IR_TRANSFORMERLIMITS_H

#include <cstdint>

namespace mlir::moe {

inline constexpr int64_t kMaxVocab = int64_t(1) << 20;
inline constexpr int64_t kMaxHidden = int64_t(1) << 16;
inline constexpr int64_t kMaxLayers = int64_t(1) << 12;
inline constexpr int64_t kMaxExperts = int64_t(1) << 14;
inline constexpr int64_t kMaxFfn = int64_t(1) << 18;
inline constexpr int64_t kMaxSeq = int64_t(1) << 20;
inline constexpr int64_t kMaxBatch = int64_t(1) << 20;
inline constexpr int64_t kMaxTokens = int64_t(1) << 28;
inline constexpr int64_t kMaxAssignments = int64_t(1) << 32;
inline constexpr int64_t kMaxParameters = int64_t(1) << 48;

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_IR_TRANSFORMERLIMITS_H
