//===- Fp8Rows.cu - FP8 rows for the expert dispatch ----------------------===//
//
// The device side of Fp8RowBlocks.h: cpu::packFp8Row's and unpackFp8Row's
// layout and rounding, a thread per FP8 block of a row.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "DeviceSimt.cuh"
#include "Fp8RowBlocks.h"
#include "Launch.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace moe::rt::cuda {
namespace {

__global__ void __launch_bounds__(fp8rows::kThreads)
    packKernel(fp8rows::Layout layout, const float *rows, int32_t *words) {
  fp8rows::packBlock(DeviceSimt{nullptr}, layout, rows, words);
}

__global__ void __launch_bounds__(fp8rows::kThreads)
    unpackKernel(fp8rows::Layout layout, const int32_t *words, float *rows) {
  fp8rows::unpackBlock(DeviceSimt{nullptr}, layout, words, rows);
}

absl::StatusOr<fp8rows::Layout> layoutOf(const char *what, int64_t count,
                                         int64_t width, int64_t block,
                                         Fp8Format format) {
  if (count < 0 || width < 0 || block <= 0)
    return absl::InvalidArgumentError(absl::StrCat(what, ": bad shape (rows ",
                                                   count, ", width ", width,
                                                   ", block ", block, ")"));
  return fp8rows::Layout{count, width, block, static_cast<int>(format)};
}

} // namespace

absl::Status packFp8Rows(const float *rows, int64_t count, int64_t width,
                         int64_t block, Fp8Format format, int32_t *words,
                         cudaStream_t stream) {
  absl::StatusOr<fp8rows::Layout> layout =
      layoutOf("packFp8Rows", count, width, block, format);
  if (!layout.ok())
    return layout.status();
  int64_t items = count * layout->blocksPerRow();
  if (items == 0)
    return absl::OkStatus();
  return launch("packFp8Rows", packKernel, gridFor(items, fp8rows::kThreads),
                fp8rows::kThreads, 0, stream, *layout, rows, words);
}

absl::Status unpackFp8Rows(const int32_t *words, int64_t count, int64_t width,
                           int64_t block, Fp8Format format, float *rows,
                           cudaStream_t stream) {
  absl::StatusOr<fp8rows::Layout> layout =
      layoutOf("unpackFp8Rows", count, width, block, format);
  if (!layout.ok())
    return layout.status();
  int64_t items = count * layout->blocksPerRow();
  if (items == 0)
    return absl::OkStatus();
  return launch("unpackFp8Rows", unpackKernel,
                gridFor(items, fp8rows::kThreads), fp8rows::kThreads, 0, stream,
                *layout, words, rows);
}

} // namespace moe::rt::cuda
