//===- AlignedBuffer.h - owned, 64-byte aligned bytes -----------*- C++ -*-===//
//
// Storage for the executor's buffers. It is kArenaAlignment (64-byte)
// aligned, like the arena offsets the compiler plans (and a cache line /
// AVX-512 vector), and the allocation reports failure as a status: an
// artifact may ask for more memory than the machine has, which is a user
// error, not a crash.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_ENGINE_ALIGNEDBUFFER_H
#define MOE_LIB_RUNTIME_ENGINE_ALIGNEDBUFFER_H

#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <string>

namespace moe::rt::engine {

class AlignedBuffer {
public:
  AlignedBuffer() = default;
  AlignedBuffer(AlignedBuffer &&other) noexcept;
  AlignedBuffer &operator=(AlignedBuffer &&other) noexcept;
  ~AlignedBuffer();

  /// `bytes` zeroed bytes; `what` names the storage in the error.
  static absl::StatusOr<AlignedBuffer> allocate(uint64_t bytes,
                                                const std::string &what);

  uint8_t *data() const { return bytes; }
  uint64_t size() const { return length; }

private:
  uint8_t *bytes = nullptr;
  uint64_t length = 0;
};

} // namespace moe::rt::engine

#endif // MOE_LIB_RUNTIME_ENGINE_ALIGNEDBUFFER_H
