//===- Fp8Blocks.cu - blockwise FP8 for the block-scaled GEMMs ------------===//
//
// The device side of Fp8BlockScaling.h: a thread block per 1 x 128 run or
// 128 x 128 square, cpu::quantizeBlockwise's rounding.
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Cuda/Kernels.h"

#include "DeviceSimt.cuh"
#include "Fp8BlockScaling.h"
#include "Launch.h"
#include "SharedMemory.cuh"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace moe::rt::cuda {
namespace {

__global__ void __launch_bounds__(fp8blocks::kThreads)
    quantizeTilesKernel(fp8blocks::Tiles tiles) {
  MOE_DYNAMIC_SHARED(unsigned char, shared, 16);
  fp8blocks::quantizeTiles(DeviceSimt{shared}, tiles);
}

} // namespace

absl::Status quantizeFp8Blocks(const float *x, int64_t rows, int64_t cols,
                               bool squares, Fp8Format format,
                               const Fp8BlockOutputs &out,
                               cudaStream_t stream) {
  if (rows < 0 || cols < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "quantizeFp8Blocks: bad shape [", rows, ", ", cols, "]"));
  if (out.codes && out.transpose && out.codesLd < rows)
    return absl::InvalidArgumentError(absl::StrCat(
        "quantizeFp8Blocks: the transposed codes' leading dimension ",
        out.codesLd, " is below the rows ", rows));
  if (out.inverseScales &&
      out.scaleRows < (out.transpose ? cols : rows))
    return absl::InvalidArgumentError(absl::StrCat(
        "quantizeFp8Blocks: the scales' rows ", out.scaleRows,
        " are fewer than the codes' rows"));
  fp8blocks::Tiles tiles{x,
                         rows,
                         cols,
                         squares ? fp8blocks::kBlock : 1,
                         static_cast<int>(format),
                         out.codes,
                         out.transpose,
                         out.codesLd,
                         out.inverseScales,
                         out.scaling,
                         out.scaleRows,
                         out.rounded,
                         out.roundedBf16};
  int64_t count = tiles.count();
  if (count == 0)
    return absl::OkStatus();
  unsigned grid = static_cast<unsigned>(std::min<int64_t>(count, 65535));
  return launch("quantizeFp8Blocks", quantizeTilesKernel, grid,
                fp8blocks::kThreads, fp8blocks::Tiles::sharedBytes(), stream,
                tiles);
}

} // namespace moe::rt::cuda
