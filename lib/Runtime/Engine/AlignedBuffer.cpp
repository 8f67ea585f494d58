//===- AlignedBuffer.cpp - owned, 64-byte aligned bytes -------------------===//

#include "AlignedBuffer.h"

#include "absl/strings/str_cat.h"

#include <cstring>
#include <new>
#include <utility>

namespace moe::rt::engine {

AlignedBuffer::AlignedBuffer(AlignedBuffer &&other) noexcept
    : bytes(std::exchange(other.bytes, nullptr)),
      length(std::exchange(other.length, 0)) {}

AlignedBuffer &AlignedBuffer::operator=(AlignedBuffer &&other) noexcept {
  if (this != &other) {
    this->~AlignedBuffer();
    bytes = std::exchange(other.bytes, nullptr);
    length = std::exchange(other.length, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() {
  if (bytes)
    ::operator delete(bytes, std::align_val_t(kArenaAlignment));
}

absl::StatusOr<AlignedBuffer> AlignedBuffer::allocate(uint64_t size,
                                                      const std::string &what) {
  // Zero-byte storage still gets a real, aligned pointer so that buffers
  // with a zero dimension have a valid (never dereferenced) address.
  uint64_t rounded = size == 0 ? kArenaAlignment : size;
  void *memory = nullptr;
  if (rounded <= static_cast<uint64_t>(PTRDIFF_MAX))
    memory = ::operator new(static_cast<size_t>(rounded),
                            std::align_val_t(kArenaAlignment), std::nothrow);
  if (!memory)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes for the ", what));
  // Zeroed so that buffers read before the first step (data() after
  // create()) are defined.
  std::memset(memory, 0, static_cast<size_t>(rounded));
  AlignedBuffer buffer;
  buffer.bytes = static_cast<uint8_t *>(memory);
  buffer.length = size;
  return buffer;
}

} // namespace moe::rt::engine
