//===- GroupChecks.h - every collective on one group, checked ---*- C++ -*-===//
#ifndef MOE_TOOLS_MOE_COMM_TEST_GROUPCHECKS_H
#define MOE_TOOLS_MOE_COMM_TEST_GROUPCHECKS_H

#include "Report.h"

#include "moe/Runtime/Comm/Communicator.h"

#include <string>
#include <vector>

namespace moe::commtest {

struct GroupUnderTest {
  rt::comm::Group &group;
  /// The group's world ranks in group-rank order, as the mesh says they
  /// must be (computed here, not asked of the layer).
  std::vector<int64_t> members;
  int64_t worldRank = 0;
  /// "{dp,tp}", the start of every check's name.
  std::string label;
  /// The element count of the large transfers.
  int64_t count = 0;
};

/// Runs every collective of the layer on `g` and records one verdict per
/// check. An error is a communication failure (the run cannot go on).
absl::Status checkGroup(const GroupUnderTest &g, Report &report);

} // namespace moe::commtest

#endif // MOE_TOOLS_MOE_COMM_TEST_GROUPCHECKS_H
