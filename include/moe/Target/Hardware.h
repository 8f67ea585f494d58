//===- Hardware.h - GPUs and clusters as data -------------------*- C++ -*-===//
//
// The machines the cost model and the planner reason about (issue 8), read
// from YAML files (hardware/gpus.yaml, hardware/leonardo.yaml): a GPU's peak
// dense BF16 and FP8 tensor throughput, HBM size and bandwidth; a cluster's
// nodes, GPUs per node, and the bandwidth and latency per GPU within a node
// (NVLink) and between nodes (the network).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_HARDWARE_H
#define MOE_TARGET_HARDWARE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::caps {
struct Capabilities;
} // namespace moe::caps

namespace mlir::moe {

/// A fused attention kernel's fractions of the GPU's BF16 peak over the
/// causal FLOPs it computes, forward and backward (FlashAttention 2 and 3,
/// cuDNN, moe-run's own): from the kernels' published benchmarks, or
/// assumed where there are none (hardware/gpus.yaml says which).
struct AttentionKernel {
  std::string kernel;
  double forward = 0, backward = 0;
};

struct GpuSpec {
  std::string name;
  int computeCapability = 0;
  double memoryGiB = 0, hbmGBps = 0, bf16Tflops = 0, fp8Tflops = 0;
  /// Fractions of the peaks that real kernels reach: a full wave of full
  /// GEMM tiles on the tensor cores, and streaming kernels of HBM. Fitted,
  /// not data-sheet figures (docs/cost-model.md says how).
  double gemmEfficiency = 0.75, hbmEfficiency = 0.8;
  /// The same for FP8 GEMMs, against the FP8 peak (0: gemmEfficiency).
  double fp8GemmEfficiency = 0;
  /// The GEMM's quantisation (KernelCost.h): streaming multiprocessors, the
  /// output tile one of them computes (rows x columns), the reduction
  /// length each tile's prologue and epilogue cost as, and the least time
  /// of a kernel.
  int64_t sms = 1, tileRows = 1, tileColumns = 1;
  /// The tile as written ("128x256").
  std::string gemmTile;
  double tileOverheadK = 0, kernelMicroseconds = 0;
  std::vector<AttentionKernel> attentionKernels;

  double memoryBytes() const { return memoryGiB * 1073741824.0; }
  double hbmBytesPerSecond() const { return hbmGBps * 1e9; }
  /// Peak dense FLOP/s of GEMMs in BF16, or FP8 where the GPU has FP8
  /// tensor cores (BF16 otherwise: FP8 is then storage only).
  double peakFlops(bool fp8) const {
    return (fp8 && fp8Tflops > 0 ? fp8Tflops : bf16Tflops) * 1e12;
  }
  /// What GEMMs and streaming kernels reach.
  double gemmFlops(bool fp8) const {
    bool fp8Cores = fp8 && fp8Tflops > 0;
    return peakFlops(fp8) * (fp8Cores && fp8GemmEfficiency > 0
                                 ? fp8GemmEfficiency
                                 : gemmEfficiency);
  }
  double streamBytesPerSecond() const {
    return hbmBytesPerSecond() * hbmEfficiency;
  }
};

struct ClusterSpec {
  std::string name;
  int64_t nodes = 0, gpusPerNode = 0;
  GpuSpec gpu;
  /// Per GPU and direction, GB/s and microseconds.
  double nvlinkGBps = 0, nvlinkLatencyUs = 0;
  double internodeGBps = 0, internodeLatencyUs = 0;
  /// Fractions of the link bandwidths collectives reach (NCCL's bus
  /// bandwidth against the wire's).
  double nvlinkEfficiency = 0.8, networkEfficiency = 0.8;
  /// Communication overlapped with compute still slows it: NCCL's (or
  /// DeepEP's) kernels hold SMs and HBM bandwidth for as long as they move
  /// data. Each second of overlapped communication inside a node (over
  /// NVLink) or across nodes adds this many seconds to the compute it hides
  /// behind. Assumed (about a sixth of an H100's SMs: DeepEP's 20 of 132),
  /// not fitted: docs/cost-model.md says why.
  double nvlinkContention = 0.15, networkContention = 0.15;

  int64_t gpus() const { return nodes * gpusPerNode; }
};

/// Reads and checks a cluster file; errors name the file, the line and
/// the field (a missing or non-positive value, an unknown key).
llvm::Expected<ClusterSpec> loadCluster(llvm::StringRef path);
/// Reads and checks a list of GPUs (hardware/gpus.yaml).
llvm::Expected<std::vector<GpuSpec>> loadGpus(llvm::StringRef path);

/// The capability record of a GPU's moec target: the first target of its
/// compute capability (h100 for sm_90), or null for a GPU no target
/// describes. What the chip's backend runs lives there
/// (moe/Runtime/Capabilities.h), not in the hardware files.
const ::moe::caps::Capabilities *capabilitiesOf(const GpuSpec &gpu);

} // namespace mlir::moe

#endif // MOE_TARGET_HARDWARE_H
