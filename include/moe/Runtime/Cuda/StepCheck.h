//===- StepCheck.h - a step's checks, found on the GPU ----------*- C++ -*-===//
//
// The checks the CPU makes inside a step (ids within their table, a finite
// loss and gradient norm) would each make the GPU's host wait for the
// stream. On the GPU, kernels record the first failure in a StepCheck in
// device memory instead, the optimizer leaves the weights and its state
// alone once one is recorded (as the CPU stops before it), and the host
// reads the record once, when the step ends, and reports it as the CPU
// would have (stepCheckStatus).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_CUDA_STEPCHECK_H
#define MOE_RUNTIME_CUDA_STEPCHECK_H

#include "moe/Runtime/Program.h"

#include "absl/status/status.h"

#include <cstdint>

namespace moe::rt::cuda {

/// The first check of a step that failed, in program order; all zero when
/// every check passed. Plain data: the device writes it, the host reads it.
struct StepCheck {
  enum Kind : int32_t {
    Passed = 0,
    /// An Embedding's token id outside [0, limit).
    BadToken = 1,
    /// A CrossEntropy's (or its gradient's) target id >= limit.
    BadTarget = 2,
    /// The loss, then the gradient norm, not finite.
    NonFiniteLoss = 3,
    NonFiniteNorm = 4,
  };
  int32_t kind;
  /// The instruction that found it.
  uint32_t instruction;
  /// Bad ids: the buffer holding them, the id, its flat position there and
  /// the bound it broke (the table's rows, the vocabulary).
  uint32_t idsBuffer;
  int32_t id;
  int64_t position;
  int64_t limit;
  /// Non-finite: the value.
  float value;
};

/// The error the CPU executor gives for `check` at `step` ("step 3: loss is
/// not finite (nan)", "step 3: instruction 0 (Embedding) at ...: token id 99
/// at [0, 5] is outside the embedding table [0, 64)"), or OK when it
/// passed. An unknown kind or instruction is an internal error.
absl::Status stepCheckStatus(const Program &program, const StepCheck &check,
                             int64_t step);

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_CUDA_STEPCHECK_H
