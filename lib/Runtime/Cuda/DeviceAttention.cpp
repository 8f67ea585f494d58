//===- DeviceAttention.cpp - BF16 attention on the tensor cores -----------===//
//
// Attention and AttentionGrad whose activations are BF16 (mixed precision)
// run the tensor-core kernels on their BF16 buffers as they are, instead of
// the fp32 kernels on widened scratch: no casts, a third of the memory
// traffic, and the tensor cores. Heads wider than the kernels' 128 and
// fp32 programs keep the fp32 kernels (the exact twin of the CPU).
//
//===----------------------------------------------------------------------===//
#include "DeviceStep.h"

#include "DeviceBuffer.h"

#include "moe/Runtime/Artifact/OpViews.h"
#include "moe/Runtime/Cuda/Kernels.h"

namespace moe::rt::cuda {
namespace {

bool allOf(const DeviceStep &step, std::initializer_list<uint32_t> buffers,
           DType dtype) {
  for (uint32_t b : buffers)
    if (step.buffer(b).dtype != dtype)
      return false;
  return true;
}

int64_t headDimOf(const DeviceStep &step, uint32_t q, int64_t heads) {
  return heads > 0 ? step.buffer(q).shape[2] / heads : 0;
}

const uint16_t *bits(const DeviceStep &step, uint32_t buffer) {
  return static_cast<const uint16_t *>(step.pointers[buffer]);
}
uint16_t *mutableBits(const DeviceStep &step, uint32_t buffer) {
  return static_cast<uint16_t *>(step.pointers[buffer]);
}

} // namespace

bool runsTensorCoreAttention(const DeviceStep &step, size_t index) {
  const Instruction &inst = step.program.instructions[index];
  if (inst.opcode == Opcode::Attention) {
    ops::AttentionView op(inst);
    return allOf(step, {op.q(), op.k(), op.v(), op.out()}, DType::BF16) &&
           allOf(step, {op.lse()}, DType::F32) &&
           flashAttentionSupports(headDimOf(step, op.q(), op.heads()));
  }
  if (inst.opcode == Opcode::AttentionGrad) {
    ops::AttentionGradView op(inst);
    return allOf(step,
                 {op.dout(), op.q(), op.k(), op.v(), op.out(), op.dq(),
                  op.dk(), op.dv()},
                 DType::BF16) &&
           allOf(step, {op.lse()}, DType::F32) &&
           flashAttentionSupports(headDimOf(step, op.q(), op.heads()));
  }
  return false;
}

absl::Status runTensorCoreAttention(const DeviceStep &step, size_t index) {
  const Instruction &inst = step.program.instructions[index];
  if (inst.opcode == Opcode::Attention) {
    ops::AttentionView op(inst);
    const std::vector<int64_t> &q = step.buffer(op.q()).shape;
    int64_t heads = op.heads();
    return flashAttentionForward(bits(step, op.q()), bits(step, op.k()),
                                 bits(step, op.v()), mutableBits(step, op.out()),
                                 step.f32(op.lse()), q[0], q[1], heads,
                                 op.kvHeads(), headDimOf(step, op.q(), heads),
                                 step.stream);
  }
  ops::AttentionGradView op(inst);
  const std::vector<int64_t> &q = step.buffer(op.q()).shape;
  int64_t heads = op.heads();
  MOE_DEVICE_BUFFER(float, workspace,
                    flashAttentionBackwardWorkspaceBytes(q[0], q[1], heads) /
                        sizeof(float),
                    step.stream);
  return flashAttentionBackward(
      bits(step, op.dout()), bits(step, op.q()), bits(step, op.k()),
      bits(step, op.v()), bits(step, op.out()), step.f32(op.lse()),
      mutableBits(step, op.dq()), mutableBits(step, op.dk()),
      mutableBits(step, op.dv()), q[0], q[1], heads, op.kvHeads(),
      headDimOf(step, op.q(), heads), workspace.get(), step.stream);
}

} // namespace moe::rt::cuda
