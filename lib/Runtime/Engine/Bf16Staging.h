//===- Bf16Staging.h - run fp32 kernels on BF16 buffers ---------*- C++ -*-===//
//
// Mixed precision on the CPU (docs/precision.md): a BF16 buffer holds BF16
// bits, and every kernel computes in fp32. An instruction that reads or
// writes BF16 buffers runs the fp32 kernel on fp32 images of them: each
// BF16 operand is decoded exactly into scratch, the kernel runs as in an
// fp32 program, and each BF16 result is rounded once to nearest even.
// So a BF16 kernel's result is RNE(fp32 kernel on the decoded operands).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ENGINE_BF16STAGING_H
#define MOE_LIB_RUNTIME_ENGINE_BF16STAGING_H

#include "Dispatch.h"

#include "absl/functional/function_ref.h"

namespace moe::rt::engine {

/// Whether instruction `index` reads or writes a BF16 buffer through a
/// kernel that needs fp32 images (Cast, AdamW and the collectives handle
/// BF16 themselves).
bool needsBf16Staging(const Program &program, size_t index);

/// `program` with every BF16 buffer declared F32: what the fp32 kernels
/// and collectives see of a staged instruction.
Program widenBf16Buffers(const Program &program);

/// Runs `run` on a context whose BF16 operands and results are fp32
/// images, then rounds the results back. `widened` is
/// widenBf16Buffers(context.program). The scratch is kept per thread and
/// only grows, so steady-state steps do not allocate.
absl::Status runStaged(
    const StepContext &context, const Program &widened, size_t index,
    absl::FunctionRef<absl::Status(const StepContext &, size_t)> run);

} // namespace moe::rt::engine

#endif // MOE_LIB_RUNTIME_ENGINE_BF16STAGING_H
