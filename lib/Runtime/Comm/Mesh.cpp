//===- Mesh.cpp - a named device mesh and its rank arithmetic -------------===//
#include "moe/Runtime/Comm/Mesh.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <climits>
#include <set>

namespace moe::rt::comm {

absl::StatusOr<Mesh> Mesh::parse(const std::string &spec) {
  Mesh mesh;
  if (spec.empty())
    return mesh;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, '=');
    int64_t size = 0;
    if (parts.size() != 2 || parts[0].empty() ||
        !absl::SimpleAtoi(parts[1], &size))
      return absl::InvalidArgumentError(absl::StrCat(
          "bad mesh '", spec, "': expected name=size[,name=size...], got '",
          item, "'"));
    mesh.axes.emplace_back(parts[0]);
    mesh.shape.push_back(size);
  }
  if (absl::Status status = mesh.validate(); !status.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("bad mesh '", spec, "': ", status.message()));
  return mesh;
}

absl::Status Mesh::validate() const {
  if (axes.size() != shape.size())
    return absl::InvalidArgumentError(absl::StrCat("the mesh has ", axes.size(),
                                                   " axis names but ",
                                                   shape.size(), " sizes"));
  std::set<std::string> seen;
  int64_t ranks = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i].empty())
      return absl::InvalidArgumentError(
          absl::StrCat("mesh axis ", i, " has an empty name"));
    if (!seen.insert(axes[i]).second)
      return absl::InvalidArgumentError(
          absl::StrCat("mesh axis '", axes[i], "' appears twice"));
    if (shape[i] <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("mesh axis '", axes[i], "' has size ", shape[i],
                       "; sizes must be positive"));
    // Checked before multiplying, so the product cannot overflow.
    if (shape[i] > INT_MAX / ranks)
      return absl::InvalidArgumentError(
          absl::StrCat("the mesh ", toString(),
                       " has more ranks than MPI can number (", INT_MAX, ")"));
    ranks *= shape[i];
  }
  return absl::OkStatus();
}

int64_t Mesh::size() const {
  int64_t ranks = 1;
  for (int64_t s : shape)
    ranks *= s;
  return ranks;
}

std::string Mesh::toString() const {
  if (axes.empty())
    return "(no axes)";
  std::vector<std::string> parts;
  for (size_t i = 0; i < axes.size(); ++i)
    parts.push_back(
        absl::StrCat(axes[i], "=", i < shape.size() ? shape[i] : -1));
  return absl::StrJoin(parts, " x ");
}

absl::StatusOr<int> Mesh::axisIndex(const std::string &name) const {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] == name)
      return static_cast<int>(i);
  return absl::NotFoundError(
      absl::StrCat("the mesh ", toString(), " has no axis '", name, "'"));
}

absl::StatusOr<std::vector<int64_t>> Mesh::coordinates(int64_t rank) const {
  if (absl::Status status = validate(); !status.ok())
    return status;
  if (rank < 0 || rank >= size())
    return absl::OutOfRangeError(
        absl::StrCat("rank ", rank, " is outside the mesh ", toString(),
                     " [0, ", size(), ")"));
  std::vector<int64_t> coords(axes.size());
  for (size_t i = axes.size(); i-- > 0;) {
    coords[i] = rank % shape[i];
    rank /= shape[i];
  }
  return coords;
}

absl::StatusOr<int64_t>
Mesh::rank(absl::Span<const int64_t> coordinates) const {
  if (absl::Status status = validate(); !status.ok())
    return status;
  if (coordinates.size() != axes.size())
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", axes.size(), " coordinates for the mesh ",
                     toString(), ", got ", coordinates.size()));
  int64_t rank = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (coordinates[i] < 0 || coordinates[i] >= shape[i])
      return absl::OutOfRangeError(
          absl::StrCat("coordinate ", coordinates[i], " on axis '", axes[i],
                       "' is outside [0, ", shape[i], ")"));
    rank = rank * shape[i] + coordinates[i];
  }
  return rank;
}

absl::StatusOr<Mesh::GroupPlace>
Mesh::groupPlace(int64_t rank,
                 const std::vector<std::string> &groupAxes) const {
  absl::StatusOr<std::vector<int64_t>> coords = coordinates(rank);
  if (!coords.ok())
    return coords.status();
  std::vector<bool> inGroup(axes.size(), false);
  std::vector<int> groupIndices;
  for (const std::string &name : groupAxes) {
    absl::StatusOr<int> index = axisIndex(name);
    if (!index.ok())
      return index.status();
    if (inGroup[*index])
      return absl::InvalidArgumentError(
          absl::StrCat("axis '", name, "' is listed twice for one group"));
    inGroup[*index] = true;
    groupIndices.push_back(*index);
  }

  GroupPlace place;
  for (size_t i = 0; i < axes.size(); ++i)
    if (!inGroup[i])
      place.color = place.color * shape[i] + (*coords)[i];
  int64_t groupSize = 1;
  for (int i : groupIndices) {
    place.key = place.key * shape[i] + (*coords)[i];
    groupSize *= shape[i];
  }

  // Enumerate the group row-major over its axes in the listed order: the
  // last listed axis varies fastest, exactly like the key.
  std::vector<int64_t> member = *coords;
  place.members.reserve(groupSize);
  for (int64_t k = 0; k < groupSize; ++k) {
    int64_t rest = k;
    for (size_t j = groupIndices.size(); j-- > 0;) {
      int axis = groupIndices[j];
      member[axis] = rest % shape[axis];
      rest /= shape[axis];
    }
    absl::StatusOr<int64_t> memberRank = this->rank(member);
    if (!memberRank.ok())
      return memberRank.status();
    place.members.push_back(*memberRank);
  }
  return place;
}

} // namespace moe::rt::comm
