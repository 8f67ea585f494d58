//===- Safetensors.h - read and write .safetensors files --------*- C++ -*-===//
//
// The format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON
//   {"__metadata__": {str: str}, "name": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8 bytes, then the data section. The
// offsets are relative to the data section; the tensors must tile it exactly
// (no gaps, no overlap, nothing after the last one).
//
// The writer writes the dtypes of artifact buffers (DType.h: F32, I32, BF16,
// F16, F8_E4M3, F8_E5M2, I64) atomically (temporary file + rename). The
// reader trusts nothing: every error names the file and, where there is one,
// the tensor. It decodes F32 and I32 as they are and BF16/F16 to fp32.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_SAFETENSORS_H
#define MOE_RUNTIME_IO_SAFETENSORS_H

#include "moe/Runtime/IO/File.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moe::rt::io {

/// The largest header the reader accepts (the reference's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderSize = 100000000;

/// A tensor to write; `data` points at caller memory holding
/// product(shape) elements of `dtype` (a safetensors name of DType.h:
/// "F32", "BF16", ...), as they are in memory.
struct TensorView {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void *data = nullptr;
};

/// A tensor read back. `dtype` is the dtype stored in the file. F32, BF16
/// and F16 tensors are decoded into `f32`; I32 tensors into `i32`.
struct TensorData {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<float> f32;
  std::vector<int32_t> i32;

  int64_t numElements() const;
  bool isInteger() const { return dtype == "I32"; }
};

struct SafetensorsFile {
  /// In the order of their data offsets.
  std::vector<TensorData> tensors;
  std::map<std::string, std::string> metadata;

  /// The tensor called `name`, or null.
  const TensorData *find(const std::string &name) const;
};

/// Writes `tensors` (in the given order) and `metadata` to `path`
/// atomically. Names must be unique, non-empty and not "__metadata__".
absl::Status
writeSafetensors(const std::string &path,
                 const std::vector<TensorView> &tensors,
                 const std::map<std::string, std::string> &metadata = {});

/// The bytes writeSafetensors() would write.
absl::StatusOr<std::string>
encodeSafetensors(const std::vector<TensorView> &tensors,
                  const std::map<std::string, std::string> &metadata = {});

/// Reads and fully verifies the file at `path`.
absl::StatusOr<SafetensorsFile> readSafetensors(const std::string &path);

/// Verifies and decodes `size` bytes held in memory; `origin` names them in
/// error messages (a path, or "<memory>").
absl::StatusOr<SafetensorsFile>
parseSafetensors(const uint8_t *data, size_t size, const std::string &origin);

/// A safetensors file mapped read-only, its header verified as
/// readSafetensors() verifies it but nothing decoded: a rank loading a
/// large checkpoint decodes, and so reads from disk, only the elements of
/// its own blocks. Copies share the mapping. Unlike readSafetensors() it
/// also accepts F8_E4M3 tensors (FP8 checkpoints), whose codes mean
/// nothing without their scales: decode() does not read them.
class MappedSafetensors {
public:
  struct Tensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    /// The tensor's bytes in the mapping.
    const uint8_t *bytes = nullptr;
    int64_t numElements() const;
    /// Whether decode() reads it: F32, BF16 or F16.
    bool isFloat() const {
      return dtype == "F32" || dtype == "BF16" || dtype == "F16";
    }
    /// An F8_E4M3 tensor, whose bytes are codes to be scaled by whoever
    /// knows their scales (block-quantized checkpoints).
    bool isFp8() const { return dtype == "F8_E4M3"; }
  };

  static absl::StatusOr<MappedSafetensors> open(const std::string &path);

  /// The tensor called `name`, or null.
  const Tensor *find(const std::string &name) const;
  const std::vector<Tensor> &tensors() const { return tensors_; }
  const std::string &path() const;

  /// Elements [first, first + count) of a float tensor (F32, BF16, F16)
  /// as fp32.
  static void decode(const Tensor &tensor, int64_t first, int64_t count,
                     float *out);

private:
  std::shared_ptr<MappedFile> mapped_;
  std::vector<Tensor> tensors_;
  /// tensors_ by name: checkpoints hold tens of thousands of tensors.
  std::map<std::string, size_t> index_;
};

/// Bytes per element of a safetensors dtype name ("F32" -> 4), or 0 if the
/// name is not a safetensors dtype.
size_t safetensorsDtypeSize(const std::string &dtype);

/// Refuses a float tensor holding a NaN or an infinity, naming `origin`
/// (the file it came from), the tensor, the value and the first bad
/// element: "w.safetensors: tensor 'x' holds nan at element [1, 4] (flat
/// index 12)". Weights like that would only show as a non-finite loss.
absl::Status checkFinite(const TensorData &tensor, const std::string &origin);
/// The same for `count` elements of tensor `name` (of `shape`) decoded into
/// `values`, which are its elements from flat index `first` on.
absl::Status checkFinite(const std::string &name,
                         const std::vector<int64_t> &shape, const float *values,
                         int64_t first, int64_t count,
                         const std::string &origin);

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_SAFETENSORS_H
