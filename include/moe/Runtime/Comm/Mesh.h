//===- Mesh.h - a named device mesh and its rank arithmetic -----*- C++ -*-===//
//
// A mesh lays the ranks of a job out on named axes (dp=2, fsdp=2, ep=2,
// tp=2). Ranks are numbered row-major over the axes as listed, the last axis
// fastest, so rank = ((c0 * s1 + c1) * s2 + c2) ... for coordinates c and
// shape s. A group over a subset of the axes is the set of ranks that agree
// on every other axis; inside it, ranks are numbered row-major over the
// group's axes in the order they are listed for the group.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_COMM_MESH_H
#define MOE_RUNTIME_COMM_MESH_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt::comm {

struct Mesh {
  std::vector<std::string> axes;
  std::vector<int64_t> shape;

  /// Parses "dp=2,tp=2" (an empty string is the mesh with no axes).
  static absl::StatusOr<Mesh> parse(const std::string &spec);

  /// Checks that axes and shape have the same length, every size is
  /// positive, names are non-empty and unique, and the number of ranks fits
  /// an MPI rank (int).
  absl::Status validate() const;

  /// The number of ranks: the product of the shape (1 for no axes).
  int64_t size() const;

  /// "dp=2 x tp=2", or "(no axes)".
  std::string toString() const;

  /// The index of axis `name`, or NotFound naming the mesh.
  absl::StatusOr<int> axisIndex(const std::string &name) const;

  /// The coordinates of `rank` on every axis.
  absl::StatusOr<std::vector<int64_t>> coordinates(int64_t rank) const;

  /// The rank at `coordinates` (one per axis, each within its axis).
  absl::StatusOr<int64_t> rank(absl::Span<const int64_t> coordinates) const;

  /// Where `rank` sits in its group over `groupAxes`: `color` numbers the
  /// groups (row-major over the other axes, in mesh order), `key` is the rank
  /// inside the group (row-major over `groupAxes` in the order given), and
  /// `members` are the group's ranks in key order.
  struct GroupPlace {
    int64_t color = 0;
    int64_t key = 0;
    std::vector<int64_t> members;
  };
  absl::StatusOr<GroupPlace>
  groupPlace(int64_t rank, const std::vector<std::string> &groupAxes) const;
};

} // namespace moe::rt::comm

#endif // MOE_RUNTIME_COMM_MESH_H
