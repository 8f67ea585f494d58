//===- AdamwBatches.h - AdamW instructions one launch updates ---*- C++ -*-===//
//
// Private to the CUDA backend. A step ends with one AdamW per parameter
// (hundreds in a large model); each would be a launch of its own, most of
// them too small to fill the GPU. Consecutive AdamW instructions that share
// their learning rate, gradient scale, step, betas and eps, and touch
// disjoint buffers, run as one multi-tensor launch (adamwMany) when the
// first of them is reached.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_ADAMWBATCHES_H
#define MOE_LIB_RUNTIME_CUDA_ADAMWBATCHES_H

#include "moe/Runtime/Program.h"

#include <cstdint>
#include <vector>

namespace moe::rt::cuda {

/// For each instruction of `program`: the first instruction of the batch
/// of two or more AdamW instructions it belongs to, or -1 (not an AdamW,
/// or one that runs alone).
std::vector<int64_t> adamwBatches(const Program &program);

} // namespace moe::rt::cuda

#endif // MOE_LIB_RUNTIME_CUDA_ADAMWBATCHES_H
