//===- DeviceBuffer.h - stream-ordered device scratch -----------*- C++ -*-===//
//
// Private to the CUDA backend: scratch an instruction needs for its own
// kernels, from CUDA's stream-ordered allocator (cudaMallocAsync), which
// reuses freed memory without a device-wide synchronisation.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_CUDA_DEVICEBUFFER_H
#define MOE_LIB_RUNTIME_CUDA_DEVICEBUFFER_H

#include "CudaStatus.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <utility>

namespace moe::rt::cuda {

template <typename T> class DeviceBuffer {
public:
  DeviceBuffer() = default;
  /// `count` elements (at least one allocated), freed in stream order.
  static absl::StatusOr<DeviceBuffer> allocate(int64_t count,
                                               cudaStream_t stream) {
    DeviceBuffer buffer;
    buffer.stream = stream;
    size_t bytes = static_cast<size_t>(count > 0 ? count : 1) * sizeof(T);
    MOE_CUDA_OK(cudaMallocAsync(reinterpret_cast<void **>(&buffer.data),
                                bytes, stream));
    return buffer;
  }
  DeviceBuffer(DeviceBuffer &&other) { *this = std::move(other); }
  DeviceBuffer &operator=(DeviceBuffer &&other) {
    std::swap(data, other.data);
    std::swap(stream, other.stream);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (data)
      cudaFreeAsync(data, stream);
  }

  T *get() const { return data; }
  /// Gives up ownership: the caller frees it (cudaFreeAsync), e.g. on the
  /// stream that uses it last.
  T *release() {
    T *released = data;
    data = nullptr;
    return released;
  }

private:
  T *data = nullptr;
  cudaStream_t stream = nullptr;
};

} // namespace moe::rt::cuda

/// Declares `name` as a DeviceBuffer<T> of `count` elements, or returns the
/// allocation's error from the enclosing function.
#define MOE_DEVICE_BUFFER(T, name, count, stream)                              \
  auto name##_allocated =                                                      \
      ::moe::rt::cuda::DeviceBuffer<T>::allocate((count), (stream));           \
  if (!name##_allocated.ok())                                                  \
    return name##_allocated.status();                                          \
  ::moe::rt::cuda::DeviceBuffer<T> name = std::move(*name##_allocated)

#endif // MOE_LIB_RUNTIME_CUDA_DEVICEBUFFER_H
