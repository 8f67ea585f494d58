//===- Collectives.h - alpha-beta cost of collectives -----------*- C++ -*-===//
//
// The time of one collective on a cluster (issue 8), shared by the cost of
// a compiled step (CostModel) and the plan search (Planner). Rings run
// hierarchically, as NCCL's do on multi-NIC nodes: a group with k ranks on
// each of n nodes reduces within the node over NVLink, then k rings (one
// per NIC) cross the nodes with 1/k of the bytes each, so the network part
// moves 2 (n-1)/n * bytes / k per GPU for an all-reduce.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_TARGET_COLLECTIVES_H
#define MOE_TARGET_COLLECTIVES_H

#include "moe/Target/Hardware.h"

namespace mlir::moe {

/// A group of ranks: `size` ranks, `perNode` of them on each node (size
/// when the group fits in one node).
struct CollectiveGroup {
  int64_t size = 1;
  int64_t perNode = 1;

  int64_t nodes() const { return (size + perNode - 1) / perNode; }
  bool withinNode() const { return size <= perNode; }
};

/// The group of `size` ranks `stride` apart (rank-major numbering, nodes
/// of `gpusPerNode` consecutive ranks).
CollectiveGroup stridedGroup(int64_t size, int64_t stride, int64_t gpusPerNode);

/// Seconds for each rank of `group` to all-reduce `bytes`.
double allReduceSeconds(const ClusterSpec &cluster, CollectiveGroup group,
                        double bytes);
/// Seconds of an all-gather whose result, or a reduce-scatter whose input,
/// is `bytes` per rank.
double allGatherSeconds(const ClusterSpec &cluster, CollectiveGroup group,
                        double bytes);
/// Seconds of an all-to-all in which each rank sends `bytes` spread evenly
/// over the group (its own share stays).
double allToAllSeconds(const ClusterSpec &cluster, CollectiveGroup group,
                       double bytes);
/// Seconds of an expert dispatch (or combine) in which each rank sends each
/// of its tokens to `topK` ranks of `group` chosen evenly, `bytes` in all,
/// and a token bound for several ranks of one other node crosses the
/// network once, then NVLink to each of them (DeepEP's node-deduplicated
/// dispatch). The network carries the expected count of distinct other
/// nodes per token, NVLink every copy.
double dedupedDispatchSeconds(const ClusterSpec &cluster, CollectiveGroup group,
                              double bytes, double topK);
/// Seconds to send `bytes` to one peer, over NVLink or the network.
double sendSeconds(const ClusterSpec &cluster, bool withinNode, double bytes);

/// The seconds each overlapped second of `group`'s communication adds to
/// the compute beside it: NVLink's contention inside a node, the network's
/// across nodes (ClusterSpec).
double contentionOf(const ClusterSpec &cluster, CollectiveGroup group);
/// What `comm` seconds of communication overlapped with `compute` seconds
/// of compute add to the compute's time: the part that outlasts it, and
/// `contention` times the part it hides.
double overlapped(double comm, double compute, double contention);

} // namespace mlir::moe

#endif // MOE_TARGET_COLLECTIVES_H
