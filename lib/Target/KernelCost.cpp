//===- KernelCost.cpp - seconds of GEMMs and attention kernels ------------===//
#include "moe/Target/KernelCost.h"

#include <algorithm>
#include <cmath>

using namespace mlir::moe;

double mlir::moe::gemmSeconds(const GpuSpec &gpu, const GemmShape &shape,
                              bool fp8, double elementBytes) {
  if (shape.m <= 0 || shape.n <= 0 || shape.k <= 0 || shape.count <= 0)
    return 0;
  // Whole tiles, in waves of one tile per SM: a partial tile or a partial
  // wave costs as a whole one.
  double rowTiles = std::ceil(shape.m / static_cast<double>(gpu.tileRows));
  double columnTiles =
      std::ceil(shape.n / static_cast<double>(gpu.tileColumns));
  double tiles = shape.count * rowTiles * columnTiles;
  double waves = std::ceil(tiles / static_cast<double>(gpu.sms));
  double tileFlops =
      2.0 * gpu.tileRows * gpu.tileColumns * (shape.k + gpu.tileOverheadK);
  double smFlops = gpu.gemmFlops(fp8) / static_cast<double>(gpu.sms);
  double compute = waves * tileFlops / smFlops;
  // Each operand read once and the result written once, at least.
  double bytes = shape.count *
                 (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) *
                 elementBytes;
  double memory = bytes / gpu.streamBytesPerSecond();
  return std::max(compute, memory) + gpu.kernelMicroseconds * 1e-6;
}

double mlir::moe::gemmEfficiencyOf(const GpuSpec &gpu, const GemmShape &shape,
                                   bool fp8, double elementBytes) {
  double seconds = gemmSeconds(gpu, shape, fp8, elementBytes);
  return seconds > 0 ? shape.flops() / seconds / gpu.peakFlops(fp8) : 0;
}

static const AttentionKernel *findKernel(const GpuSpec &gpu,
                                         llvm::StringRef kernel) {
  for (const AttentionKernel &k : gpu.attentionKernels)
    if (k.kernel == kernel)
      return &k;
  return nullptr;
}

double mlir::moe::attentionSeconds(const GpuSpec &gpu, llvm::StringRef kernel,
                                   double flops, bool backward) {
  const AttentionKernel *k = findKernel(gpu, kernel);
  double efficiency = !k         ? gpu.gemmEfficiency
                      : backward ? k->backward
                                 : k->forward;
  return flops / (gpu.peakFlops(false) * efficiency);
}

std::optional<std::string>
mlir::moe::checkAttentionKernel(const GpuSpec &gpu, llvm::StringRef kernel) {
  if (findKernel(gpu, kernel))
    return std::nullopt;
  std::string known;
  for (const AttentionKernel &k : gpu.attentionKernels)
    known += (known.empty() ? "" : ", ") + k.kernel;
  return "gpu '" + gpu.name + "' has no efficiency for attention kernel '" +
         kernel.str() + "' (it lists " + (known.empty() ? "none" : known) +
         "; hardware/gpus.yaml)";
}
