//===- DeviceBf16.cpp - instructions that run on BF16 storage -------------===//
//
// Which instructions of a mixed-precision step run their kernels on BF16
// buffers as they are, instead of on fp32 scratch the dispatch widens them
// into (runWidened): each opcode with a BF16 kernel, when its buffers have
// exactly the dtypes that kernel takes. Anything else (another mix, heads
// wider than the tensor-core attention's 128) is widened as before.
//
// Element-wise kernels, norms, RoPE, cross-entropy and the embedding compute
// in fp32 on the widened values and round each BF16 result once, so they
// give the bits of the widened run without its scratch and passes.
// Attention runs the tensor-core kernels (docs/precision.md, "Attention on
// the GPU").
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

} // namespace

bool runsOnBf16Storage(const DeviceStep &step, size_t index) {
  const Instruction &inst = step.program.instructions[index];
  auto bf16 = [&](std::initializer_list<uint32_t> buffers) {
    return allOf(step, buffers, DType::BF16);
  };
  auto f32 = [&](std::initializer_list<uint32_t> buffers) {
    return allOf(step, buffers, DType::F32);
  };
  switch (inst.opcode) {
  case Opcode::Attention: {
    ops::AttentionView op(inst);
    return bf16({op.q(), op.k(), op.v(), op.out()}) && f32({op.lse()}) &&
           flashAttentionSupports(headDimOf(step, op.q(), op.heads()));
  }
  case Opcode::AttentionGrad: {
    ops::AttentionGradView op(inst);
    return bf16({op.dout(), op.q(), op.k(), op.v(), op.out(), op.dq(), op.dk(),
                 op.dv()}) &&
           f32({op.lse()}) &&
           flashAttentionSupports(headDimOf(step, op.q(), op.heads()));
  }
  case Opcode::Add: {
    ops::AddView op(inst);
    return bf16({op.a(), op.b(), op.y()});
  }
  case Opcode::Swiglu: {
    ops::SwigluView op(inst);
    return bf16({op.gate(), op.up(), op.y()});
  }
  case Opcode::SwigluGrad: {
    ops::SwigluGradView op(inst);
    return bf16({op.dy(), op.gate(), op.up(), op.dgate(), op.dup()});
  }
  case Opcode::RmsNorm: {
    ops::RmsNormView op(inst);
    return bf16({op.x(), op.w(), op.y()});
  }
  case Opcode::RmsNormGrad: {
    ops::RmsNormGradView op(inst);
    return bf16({op.dy(), op.x(), op.w(), op.dx()}) && f32({op.dw()});
  }
  case Opcode::Rope: {
    ops::RopeView op(inst);
    return bf16({op.x(), op.y()});
  }
  case Opcode::RopeGrad: {
    ops::RopeGradView op(inst);
    return bf16({op.dy(), op.dx()});
  }
  case Opcode::CrossEntropy: {
    ops::CrossEntropyView op(inst);
    return bf16({op.logits()}) && f32({op.loss()});
  }
  case Opcode::CrossEntropyGrad: {
    ops::CrossEntropyGradView op(inst);
    return bf16({op.logits(), op.dlogits()}) && f32({op.dloss()});
  }
  case Opcode::Embedding: {
    ops::EmbeddingView op(inst);
    return bf16({op.table(), op.y()});
  }
  case Opcode::EmbeddingGrad: {
    ops::EmbeddingGradView op(inst);
    return bf16({op.dy()}) && f32({op.dtable()});
  }
  default:
    return false;
  }
}

absl::Status runTensorCoreAttention(const DeviceStep &step, size_t index) {
  const Instruction &inst = step.program.instructions[index];
  if (inst.opcode == Opcode::Attention) {
    ops::AttentionView op(inst);
    const std::vector<int64_t> &q = step.buffer(op.q()).shape;
    int64_t heads = op.heads();
    return flashAttentionForward(
        step.bf16(op.q()), step.bf16(op.k()), step.bf16(op.v()),
        step.bf16(op.out()), step.f32(op.lse()), q[0], q[1], heads,
        op.kvHeads(), headDimOf(step, op.q(), heads), step.stream);
  }
  ops::AttentionGradView op(inst);
  const std::vector<int64_t> &q = step.buffer(op.q()).shape;
  int64_t heads = op.heads();
  MOE_DEVICE_BUFFER(float, workspace,
                    flashAttentionBackwardWorkspaceBytes(q[0], q[1], heads) /
                        sizeof(float),
                    step.stream);
  return flashAttentionBackward(
      step.bf16(op.dout()), step.bf16(op.q()), step.bf16(op.k()),
      step.bf16(op.v()), step.bf16(op.out()), step.f32(op.lse()),
      step.bf16(op.dq()), step.bf16(op.dk()), step.bf16(op.dv()), q[0], q[1],
      heads, op.kvHeads(), headDimOf(step, op.q(), heads), workspace.get(),
      step.stream);
}

} // namespace moe::rt::cuda
