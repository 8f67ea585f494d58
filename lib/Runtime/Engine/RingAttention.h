//===- RingAttention.h - attention over a ring of sequence blocks -*- C++
//-*-===//
//
// RingAttention and RingAttentionGrad on the CPU backend: context
// parallelism's attention with the key/value blocks passed around the
// sequence group (RingAttention.cpp says how).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_RINGATTENTION_H
#define MOE_RUNTIME_ENGINE_RINGATTENTION_H

#include "Dispatch.h"

#include "absl/status/status.h"

namespace moe::rt::engine {

/// Runs instruction `index` (RingAttention or RingAttentionGrad) over its
/// sequence group; the operands are this rank's blocks, in fp32.
absl::Status runRingAttention(const StepContext &context, size_t index);

} // namespace moe::rt::engine

#endif // MOE_RUNTIME_ENGINE_RINGATTENTION_H
