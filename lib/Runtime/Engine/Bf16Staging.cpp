//===- Bf16Staging.cpp - run fp32 kernels on BF16 buffers -----------------===//

#include "Bf16Staging.h"

#include "Collectives.h"

#include "moe/Runtime/Cpu/Kernels.h"

#include <algorithm>

namespace moe::rt::engine {

bool needsBf16Staging(const Program &program, size_t index) {
  const Instruction &instruction = program.instructions[index];
  // Collectives move and sum BF16 themselves, so that BF16 travels as BF16.
  if (instruction.opcode == Opcode::Cast || isAdamW(instruction.opcode) ||
      isCollective(instruction.opcode))
    return false;
  auto bf16 = [&](uint32_t b) {
    return program.buffers[b].dtype == DType::BF16;
  };
  return std::any_of(instruction.operands.begin(), instruction.operands.end(),
                     bf16) ||
         std::any_of(instruction.results.begin(), instruction.results.end(),
                     bf16);
}

Program widenBf16Buffers(const Program &program) {
  Program widened = program;
  for (Buffer &buffer : widened.buffers)
    if (buffer.dtype == DType::BF16)
      buffer.dtype = DType::F32;
  return widened;
}

namespace {

/// One BF16 buffer's fp32 image in the scratch.
struct Image {
  uint32_t buffer;
  size_t offset;
  int64_t elements;
};

/// 64-byte steps, as the arena aligns its buffers.
constexpr size_t kAlignFloats = 16;

} // namespace

absl::Status runStaged(
    const StepContext &context, const Program &widened, size_t index,
    absl::FunctionRef<absl::Status(const StepContext &, size_t)> run) {
  const Program &program = context.program;
  const Instruction &instruction = program.instructions[index];
  thread_local std::vector<float> scratch;
  thread_local std::vector<uint8_t *> pointers;
  thread_local std::vector<Image> images;
  images.clear();
  size_t total = 0;
  auto add = [&](uint32_t b) {
    const Buffer &buffer = program.buffers[b];
    if (buffer.dtype != DType::BF16)
      return;
    for (const Image &image : images)
      if (image.buffer == b)
        return;
    images.push_back({b, total, buffer.numElements()});
    total += (static_cast<size_t>(buffer.numElements()) + kAlignFloats - 1) /
             kAlignFloats * kAlignFloats;
  };
  for (uint32_t b : instruction.operands)
    add(b);
  for (uint32_t b : instruction.results)
    add(b);
  if (scratch.size() < total + kAlignFloats)
    scratch.resize(total + kAlignFloats);
  // The vector's storage is only 16-byte aligned; start at 64 bytes.
  float *base = scratch.data();
  base += (kAlignFloats -
           (reinterpret_cast<uintptr_t>(base) / sizeof(float)) % kAlignFloats) %
          kAlignFloats;
  pointers.assign(context.pointers.begin(), context.pointers.end());
  // Results are decoded too: a kernel that writes part of its result (or
  // accumulates into it) leaves the rest as it was, and decoding then
  // rounding BF16 gives back the same bits.
  for (const Image &image : images) {
    float *to = base + image.offset;
    cpu::castFromBf16(
        reinterpret_cast<const uint16_t *>(context.pointers[image.buffer]), to,
        image.elements);
    pointers[image.buffer] = reinterpret_cast<uint8_t *>(to);
  }
  StepContext staged{widened,
                     pointers,
                     context.groups,
                     context.packScratch,
                     context.stageGroup,
                     context.foreignGradients,
                     context.trace,
                     context.expertChunks,
                     context.overlapExperts,
                     context.threadsMayCommunicate,
                     /*widened=*/nullptr,
                     &program};
  if (absl::Status status = run(staged, index); !status.ok())
    return status;
  for (const Image &image : images) {
    bool written = std::find(instruction.results.begin(),
                             instruction.results.end(),
                             image.buffer) != instruction.results.end();
    if (written)
      cpu::castToBf16(base + image.offset,
                      reinterpret_cast<uint16_t *>(context.pointers[image.buffer]),
                      image.elements);
  }
  return absl::OkStatus();
}

} // namespace moe::rt::engine
