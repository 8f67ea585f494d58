//===- NcclReduce.h - the emulation's reductions in rank order --*- C++ -*-===//
//
// Private to the NCCL emulation. Every rank of a collective holds every
// rank's contribution and reduces them itself, in rank order 0..n-1, so the
// result is bitwise the same on every rank and the same from run to run:
// floats and doubles accumulate in their own type; float16 and bfloat16
// decode exactly to fp32, accumulate there and round once to nearest even
// (not after every hop as NCCL's ring does); integers wrap. A NaN in any
// contribution makes max and min NaN (the poison of unwritten memory shows).
// avg is the sum divided by the number of ranks (truncating for integers).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_NCCLREDUCE_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_NCCLREDUCE_H

#include <nccl.h>

#include <cstddef>
#include <vector>

namespace moe::rt::virtual_gpu::nccl {

/// Whether the emulation reduces `type` with `op` (every type but the
/// float8 ones, with sum, prod, max, min and avg).
bool canReduce(ncclDataType_t type, ncclRedOp_t op);

/// output[i] = op over inputs[0][i], ..., inputs[n-1][i], in that order.
/// `output` may be one of the inputs (in place), element for element.
void reduceInRankOrder(ncclDataType_t type, ncclRedOp_t op,
                       const std::vector<const void *> &inputs, void *output,
                       size_t count);

} // namespace moe::rt::virtual_gpu::nccl

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_NCCLREDUCE_H
