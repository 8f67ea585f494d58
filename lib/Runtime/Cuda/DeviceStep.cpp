//===- DeviceStep.cpp - scalars and BF16 GEMMs of a step on the GPU -------===//
#include "DeviceStep.h"

#include "DeviceBuffer.h"

#include "moe/Runtime/Cuda/Kernels.h"

namespace moe::rt::cuda {

int64_t rowsOf(const Buffer &buffer) {
  int64_t count = 1;
  for (size_t d = 0; d + 1 < buffer.shape.size(); ++d)
    count *= buffer.shape[d];
  return count;
}

template <typename T>
absl::Status DeviceStep::read(const T *device, int64_t count, T *host) const {
  return staging.read(host, device, count * sizeof(T), stream, watch);
}

absl::Status synchronize(cudaStream_t stream, CollectiveWatch *watch) {
  if (!watch)
    return cudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return watch->waitUntil([stream]() {
    return queryDone(cudaStreamQuery(stream), "cudaStreamQuery");
  });
}

template absl::Status DeviceStep::read(const float *, int64_t, float *) const;
template absl::Status DeviceStep::read(const double *, int64_t,
                                       double *) const;
template absl::Status DeviceStep::read(const int64_t *, int64_t,
                                       int64_t *) const;
template absl::Status DeviceStep::read(const int32_t *, int64_t,
                                       int32_t *) const;
template absl::Status DeviceStep::read(const unsigned long long *, int64_t,
                                       unsigned long long *) const;

absl::StatusOr<float> DeviceStep::readScalar(uint32_t buffer) const {
  if (hostScalars)
    if (auto known = hostScalars->find(buffer); known != hostScalars->end())
      return known->second;
  float value = 0.0f;
  MOE_CUDA_TRY(read(f32(buffer), 1, &value));
  return value;
}

absl::Status DeviceStep::writeScalar(uint32_t buffer, float value) const {
  // From pageable memory, cudaMemcpyAsync returns once it has staged the
  // source, so `value` may go; no wait for the stream.
  MOE_CUDA_OK(cudaMemcpyAsync(f32(buffer), &value, sizeof(float),
                              cudaMemcpyHostToDevice, stream));
  if (hostScalars)
    (*hostScalars)[buffer] = value;
  return absl::OkStatus();
}

absl::StatusOr<int32_t> DeviceStep::readStep(uint32_t buffer) const {
  if (buffer == program.step)
    return static_cast<int32_t>(step);
  int32_t value = 0;
  MOE_CUDA_TRY(read(i32(buffer), 1, &value));
  return value;
}

void DeviceStep::forgetResultsOf(size_t index) const {
  if (hostScalars)
    for (uint32_t result : program.instructions[index].results)
      hostScalars->erase(result);
}

absl::StatusOr<std::vector<int32_t>>
DeviceStep::readIds(uint32_t buffer) const {
  std::vector<int32_t> ids(this->buffer(buffer).numElements());
  MOE_CUDA_TRY(read(i32(buffer), static_cast<int64_t>(ids.size()), ids.data()));
  return ids;
}

absl::Status DeviceStep::gemm(const GemmSpec &spec, const uint16_t *a,
                              const uint16_t *b, float beta, void *c) const {
  // As cpu's detail::gemm: an empty C is nothing to do and an empty sum
  // (k = 0) leaves beta C; cuBLASLt refuses both (validateGemm).
  if (spec.batch == 1 && spec.m >= 0 && spec.n >= 0 &&
      (spec.m == 0 || spec.n == 0))
    return absl::OkStatus();
  if (spec.batch == 1 && spec.k == 0 && spec.m > 0 && spec.n > 0 &&
      spec.ldc >= spec.n) {
    if (beta == 1.0f)
      return absl::OkStatus();
    if (beta == 0.0f) {
      // Zero bits are +0 in either output type.
      size_t element = spec.c == GemmOutput::BF16 ? sizeof(uint16_t)
                                                  : sizeof(float);
      MOE_CUDA_OK(cudaMemset2DAsync(c, spec.ldc * element, 0,
                                    spec.n * element, spec.m, stream));
      return absl::OkStatus();
    }
  }
  GemmSpec bf16 = spec;
  bf16.a = bf16.b = GemmInput::BF16;
  return gemms.run(bf16, 1.0f, a, b, beta, c, stream);
}

absl::StatusOr<const uint16_t *>
DeviceStep::castToBf16Scratch(const float *data, int64_t n,
                              DeviceBuffer<uint16_t> &copy) const {
  absl::StatusOr<DeviceBuffer<uint16_t>> allocated =
      DeviceBuffer<uint16_t>::allocate(n, stream);
  if (!allocated.ok())
    return allocated.status();
  copy = std::move(*allocated);
  MOE_CUDA_TRY(castToBf16(data, copy.get(), n, stream));
  return copy.get();
}

absl::Status DeviceStep::gemmOnBuffers(const GemmSpec &spec, uint32_t a,
                                       uint32_t b, uint32_t c) const {
  // The fp32 inputs' BF16 copies; a BF16 input is read as it is.
  auto asBf16 = [&](uint32_t input, DeviceBuffer<uint16_t> &copy)
      -> absl::StatusOr<const uint16_t *> {
    const Buffer &in = buffer(input);
    if (in.dtype == DType::BF16)
      return bf16(input);
    return castToBf16Scratch(f32(input), in.numElements(), copy);
  };
  DeviceBuffer<uint16_t> aCopy, bCopy;
  absl::StatusOr<const uint16_t *> aBf16 = asBf16(a, aCopy);
  if (!aBf16.ok())
    return aBf16.status();
  absl::StatusOr<const uint16_t *> bBf16 = asBf16(b, bCopy);
  if (!bBf16.ok())
    return bBf16.status();
  // A BF16 result straight from cuBLASLt: fp32 sums rounded once, to
  // nearest even, in its epilogue (no fp32 scratch and cast).
  GemmSpec out = spec;
  out.c = buffer(c).dtype == DType::BF16 ? GemmOutput::BF16 : GemmOutput::F32;
  return gemm(out, *aBf16, *bBf16, 0.0f, pointers[c]);
}

} // namespace moe::rt::cuda
