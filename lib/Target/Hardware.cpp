//===- Hardware.cpp - GPUs and clusters as data ---------------------------===//
#include "moe/Target/Hardware.h"
#include "moe/Runtime/Capabilities.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLTraits.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir::moe;

namespace llvm::yaml {
template <> struct MappingTraits<AttentionKernel> {
  static void mapping(IO &io, AttentionKernel &kernel) {
    io.mapRequired("kernel", kernel.kernel);
    io.mapRequired("forward", kernel.forward);
    io.mapRequired("backward", kernel.backward);
  }
  static std::string validate(IO &, AttentionKernel &kernel) {
    if (!(kernel.forward > 0 && kernel.forward <= 1) ||
        !(kernel.backward > 0 && kernel.backward <= 1))
      return "attention kernel '" + kernel.kernel +
             "': forward and backward must be in (0, 1]";
    return "";
  }
};
} // namespace llvm::yaml

LLVM_YAML_IS_SEQUENCE_VECTOR(AttentionKernel)

namespace llvm::yaml {
template <> struct MappingTraits<GpuSpec> {
  static void mapping(IO &io, GpuSpec &gpu) {
    io.mapRequired("name", gpu.name);
    io.mapRequired("compute_capability", gpu.computeCapability);
    io.mapRequired("memory_gib", gpu.memoryGiB);
    io.mapRequired("hbm_gbps", gpu.hbmGBps);
    io.mapRequired("bf16_tflops", gpu.bf16Tflops);
    io.mapRequired("fp8_tflops", gpu.fp8Tflops);
    io.mapOptional("gemm_efficiency", gpu.gemmEfficiency, 0.75);
    io.mapOptional("hbm_efficiency", gpu.hbmEfficiency, 0.8);
    io.mapOptional("fp8_gemm_efficiency", gpu.fp8GemmEfficiency, 0.0);
    io.mapRequired("sms", gpu.sms);
    io.mapRequired("gemm_tile", gpu.gemmTile);
    io.mapOptional("tile_overhead_k", gpu.tileOverheadK, 0.0);
    io.mapOptional("kernel_us", gpu.kernelMicroseconds, 0.0);
    io.mapRequired("attention_kernels", gpu.attentionKernels);
  }
  static std::string validate(IO &, GpuSpec &gpu) {
    if (gpu.computeCapability <= 0 || gpu.memoryGiB <= 0 || gpu.hbmGBps <= 0 ||
        gpu.bf16Tflops <= 0 || gpu.fp8Tflops < 0)
      return "gpu '" + gpu.name +
             "': compute_capability, memory_gib, hbm_gbps and bf16_tflops "
             "must be positive, fp8_tflops >= 0";
    if (!(gpu.gemmEfficiency > 0 && gpu.gemmEfficiency <= 1) ||
        !(gpu.hbmEfficiency > 0 && gpu.hbmEfficiency <= 1))
      return "gpu '" + gpu.name +
             "': gemm_efficiency and hbm_efficiency must be in (0, 1]";
    if (!(gpu.fp8GemmEfficiency >= 0 && gpu.fp8GemmEfficiency <= 1))
      return "gpu '" + gpu.name + "': fp8_gemm_efficiency must be in [0, 1]";
    if (gpu.sms <= 0 || gpu.tileOverheadK < 0 || gpu.kernelMicroseconds < 0)
      return "gpu '" + gpu.name +
             "': sms must be positive, tile_overhead_k and kernel_us >= 0";
    llvm::StringRef rows, columns;
    std::tie(rows, columns) = llvm::StringRef(gpu.gemmTile).split('x');
    if (rows.getAsInteger(10, gpu.tileRows) ||
        columns.getAsInteger(10, gpu.tileColumns) || gpu.tileRows <= 0 ||
        gpu.tileColumns <= 0)
      return "gpu '" + gpu.name + "': gemm_tile '" + gpu.gemmTile +
             "' is not ROWSxCOLUMNS (e.g. 128x256)";
    for (size_t i = 0; i < gpu.attentionKernels.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (gpu.attentionKernels[i].kernel == gpu.attentionKernels[j].kernel)
          return "gpu '" + gpu.name + "': attention kernel '" +
                 gpu.attentionKernels[i].kernel + "' listed twice";
    return "";
  }
};

template <> struct MappingTraits<ClusterSpec> {
  static void mapping(IO &io, ClusterSpec &cluster) {
    io.mapRequired("name", cluster.name);
    io.mapRequired("nodes", cluster.nodes);
    io.mapRequired("gpus_per_node", cluster.gpusPerNode);
    io.mapRequired("gpu", cluster.gpu);
    io.mapRequired("nvlink_gbps", cluster.nvlinkGBps);
    io.mapRequired("nvlink_latency_us", cluster.nvlinkLatencyUs);
    io.mapRequired("internode_gbps", cluster.internodeGBps);
    io.mapRequired("internode_latency_us", cluster.internodeLatencyUs);
    io.mapOptional("nvlink_efficiency", cluster.nvlinkEfficiency, 0.8);
    io.mapOptional("network_efficiency", cluster.networkEfficiency, 0.8);
    io.mapOptional("nvlink_contention", cluster.nvlinkContention, 0.15);
    io.mapOptional("network_contention", cluster.networkContention, 0.15);
  }
  static std::string validate(IO &, ClusterSpec &cluster) {
    if (cluster.nodes <= 0 || cluster.gpusPerNode <= 0 ||
        cluster.nvlinkGBps <= 0 || cluster.internodeGBps <= 0 ||
        cluster.nvlinkLatencyUs < 0 || cluster.internodeLatencyUs < 0)
      return "cluster '" + cluster.name +
             "': nodes, gpus_per_node and the bandwidths must be positive, "
             "the latencies >= 0";
    if (!(cluster.nvlinkEfficiency > 0 && cluster.nvlinkEfficiency <= 1) ||
        !(cluster.networkEfficiency > 0 && cluster.networkEfficiency <= 1))
      return "cluster '" + cluster.name +
             "': nvlink_efficiency and network_efficiency must be in (0, 1]";
    if (!(cluster.nvlinkContention >= 0 && cluster.nvlinkContention <= 1) ||
        !(cluster.networkContention >= 0 && cluster.networkContention <= 1))
      return "cluster '" + cluster.name +
             "': nvlink_contention and network_contention must be in [0, 1]";
    return "";
  }
};
} // namespace llvm::yaml

LLVM_YAML_IS_SEQUENCE_VECTOR(GpuSpec)

namespace {
/// Parses `path` into `value`; the YAML reader's diagnostics (file, line,
/// column) become the error.
template <typename T> llvm::Error parse(llvm::StringRef path, T &value) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(path);
  if (!file)
    return llvm::createStringError(file.getError(), "cannot read %s: %s",
                                   path.str().c_str(),
                                   file.getError().message().c_str());
  std::string messages;
  llvm::raw_string_ostream diagnostics(messages);
  llvm::SourceMgr sources;
  auto report = [](const llvm::SMDiagnostic &diagnostic, void *context) {
    diagnostic.print(nullptr, *static_cast<llvm::raw_ostream *>(context),
                     /*ShowColors=*/false);
  };
  llvm::yaml::Input input((*file)->getMemBufferRef(), nullptr, report,
                          &diagnostics);
  input >> value;
  if (input.error())
    return llvm::createStringError(input.error(), "%s",
                                   llvm::StringRef(messages).rtrim().str().c_str());
  return llvm::Error::success();
}
} // namespace

llvm::Expected<ClusterSpec> mlir::moe::loadCluster(llvm::StringRef path) {
  ClusterSpec cluster;
  if (llvm::Error error = parse(path, cluster))
    return std::move(error);
  return cluster;
}

llvm::Expected<std::vector<GpuSpec>> mlir::moe::loadGpus(llvm::StringRef path) {
  std::vector<GpuSpec> gpus;
  if (llvm::Error error = parse(path, gpus))
    return std::move(error);
  return gpus;
}

const ::moe::caps::Capabilities *
mlir::moe::capabilitiesOf(const GpuSpec &gpu) {
  for (const ::moe::caps::Capabilities &record : ::moe::caps::kCapabilities)
    if (record.backend != "cpu" &&
        record.computeCapability == gpu.computeCapability)
      return &record;
  return nullptr;
}
