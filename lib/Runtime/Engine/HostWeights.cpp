//===- HostWeights.cpp - host staging of a device rank's weights ----------===//
#include "moe/Runtime/Engine/HostWeights.h"

#include "moe/Runtime/Cpu/Kernels.h"

namespace moe::rt::engine {

HostWeights::HostWeights(std::shared_ptr<const Program> program, int64_t rank,
                         const std::vector<bool> *held)
    : prog(std::move(program)), placement(*prog, rank) {
  values.resize(prog->buffers.size());
  for (uint32_t b = 0; b < prog->buffers.size(); ++b) {
    const Buffer &buffer = prog->buffers[b];
    if (held && !(*held)[b])
      continue;
    if (buffer.kind == BufferKind::Parameter)
      params.push_back(b);
    else if (buffer.kind == BufferKind::OptimizerState)
      states.push_back(b);
    else
      continue;
    values[b].assign(static_cast<size_t>(buffer.numElements()), 0.0f);
    total += buffer.sizeInBytes();
  }
}

float *HostWeights::data(uint32_t buffer) {
  if (buffer >= values.size() || values[buffer].empty() ||
      prog->buffers[buffer].dtype != DType::F32)
    return nullptr;
  return values[buffer].data();
}

const float *HostWeights::data(uint32_t buffer) const {
  return const_cast<HostWeights *>(this)->data(buffer);
}

std::vector<int64_t> HostWeights::globalShape(uint32_t buffer) const {
  if (buffer >= prog->buffers.size())
    return {};
  return placement.globalShape(prog->buffers[buffer]);
}

void initializeWeights(WeightStore &weights, uint64_t seed) {
  const Program &program = weights.program();
  for (uint32_t b : weights.parameters()) {
    const Buffer &buffer = program.buffers[b];
    float *values = weights.data(b);
    int64_t count = buffer.numElements();
    switch (buffer.init) {
    case Init::Normal: {
      uint64_t stream = cpu::nameHash(buffer.name.c_str());
      // Run by run, each from its index in the whole tensor.
      weights.placementOf().forEachRun(
          buffer, [&](int64_t local, int64_t global, int64_t length) {
            cpu::initNormal(values + local, length, buffer.initStd, seed,
                            stream, global);
          });
      break;
    }
    case Init::Ones:
      cpu::fill(values, 1.0f, count);
      break;
    case Init::Zeros:
    case Init::None: // rejected for parameters by the verifier
      cpu::fill(values, 0.0f, count);
      break;
    }
  }
  for (uint32_t b : weights.optimizerStates())
    cpu::fill(weights.data(b), 0.0f, program.buffers[b].numElements());
}

uint64_t hostWeightBytes(const Program &program) {
  uint64_t bytes = 0;
  for (const Buffer &buffer : program.buffers)
    if (buffer.kind == BufferKind::Parameter ||
        buffer.kind == BufferKind::OptimizerState)
      bytes += buffer.sizeInBytes();
  return bytes;
}

} // namespace moe::rt::engine
