//===- Collectives.cpp - alpha-beta cost of collectives -------------------===//
#include "moe/Target/Collectives.h"

#include <algorithm>
#include <cmath>

using namespace mlir::moe;

namespace {
double nvlinkBytesPerSecond(const ClusterSpec &c) {
  return c.nvlinkGBps * 1e9 * c.nvlinkEfficiency;
}
double networkBytesPerSecond(const ClusterSpec &c) {
  return c.internodeGBps * 1e9 * c.networkEfficiency;
}

/// `passes` ring passes (2 for an all-reduce, 1 for an all-gather or a
/// reduce-scatter) over `bytes` per rank: inside the node over NVLink, then
/// across the nodes, the group's k NICs per node each carrying 1/k.
double ringSeconds(const ClusterSpec &cluster, CollectiveGroup group,
                   double bytes, double passes) {
  double seconds = 0;
  int64_t local = std::min(group.size, group.perNode);
  if (local > 1) {
    double k = static_cast<double>(local);
    seconds += passes * ((k - 1) / k * bytes / nvlinkBytesPerSecond(cluster) +
                         (k - 1) * cluster.nvlinkLatencyUs * 1e-6);
  }
  int64_t nodes = group.nodes();
  if (nodes > 1) {
    double n = static_cast<double>(nodes), k = static_cast<double>(local);
    seconds += passes * ((n - 1) / n * bytes / k / networkBytesPerSecond(cluster) +
                         (n - 1) * cluster.internodeLatencyUs * 1e-6);
  }
  return seconds;
}
} // namespace

CollectiveGroup mlir::moe::stridedGroup(int64_t size, int64_t stride,
                                        int64_t gpusPerNode) {
  CollectiveGroup group;
  group.size = std::max<int64_t>(size, 1);
  // Ranks r, r + stride, ...: a node of g consecutive ranks holds g / stride
  // of them (at least one).
  group.perNode = std::clamp<int64_t>(gpusPerNode / std::max<int64_t>(stride, 1),
                                      1, group.size);
  return group;
}

double mlir::moe::allReduceSeconds(const ClusterSpec &cluster,
                                   CollectiveGroup group, double bytes) {
  // Reduce-scatter then all-gather.
  return group.size > 1 ? ringSeconds(cluster, group, bytes, 2.0) : 0.0;
}

double mlir::moe::allGatherSeconds(const ClusterSpec &cluster,
                                   CollectiveGroup group, double bytes) {
  return group.size > 1 ? ringSeconds(cluster, group, bytes, 1.0) : 0.0;
}

double mlir::moe::allToAllSeconds(const ClusterSpec &cluster,
                                  CollectiveGroup group, double bytes) {
  if (group.size <= 1)
    return 0;
  // Of each rank's bytes, the shares of peers on other nodes cross its NIC
  // and the rest NVLink; both run at once.
  double n = static_cast<double>(group.size);
  int64_t local = std::min(group.size, group.perNode);
  double intra = (local - 1) / n * bytes, inter = (n - local) / n * bytes;
  double nvlink = local > 1 ? intra / nvlinkBytesPerSecond(cluster) +
                                  cluster.nvlinkLatencyUs * 1e-6
                            : 0.0;
  double network = inter > 0 ? inter / networkBytesPerSecond(cluster) +
                                   cluster.internodeLatencyUs * 1e-6
                             : 0.0;
  return std::max(nvlink, network);
}

double mlir::moe::dedupedDispatchSeconds(const ClusterSpec &cluster,
                                         CollectiveGroup group, double bytes,
                                         double topK) {
  if (group.size <= 1 || topK <= 0)
    return 0;
  double n = static_cast<double>(group.size);
  int64_t local = std::min(group.size, group.perNode);
  double nodes = static_cast<double>(group.nodes());
  // Each copy reaches its rank over NVLink, except those staying on the
  // rank itself.
  double nvlink = (n - 1) / n * bytes / nvlinkBytesPerSecond(cluster) +
                  (local > 1 ? cluster.nvlinkLatencyUs * 1e-6 : 0.0);
  if (nodes <= 1)
    return nvlink;
  // Per token, the other nodes at least one of its topK ranks is on.
  double perToken = bytes / topK;
  double otherNodes = (nodes - 1) * (1.0 - std::pow(1.0 - 1.0 / nodes, topK));
  double network = otherNodes * perToken / networkBytesPerSecond(cluster) +
                   cluster.internodeLatencyUs * 1e-6;
  return std::max(nvlink, network);
}

double mlir::moe::sendSeconds(const ClusterSpec &cluster, bool withinNode,
                              double bytes) {
  return withinNode ? bytes / nvlinkBytesPerSecond(cluster) +
                          cluster.nvlinkLatencyUs * 1e-6
                    : bytes / networkBytesPerSecond(cluster) +
                          cluster.internodeLatencyUs * 1e-6;
}

double mlir::moe::contentionOf(const ClusterSpec &cluster,
                               CollectiveGroup group) {
  return group.withinNode() ? cluster.nvlinkContention
                            : cluster.networkContention;
}

double mlir::moe::overlapped(double comm, double compute, double contention) {
  double hidden = std::min(comm, std::max(compute, 0.0));
  return comm - hidden + contention * hidden;
}
