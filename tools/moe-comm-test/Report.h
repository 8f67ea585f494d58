//===- Report.h - one verdict per check, agreed by every rank ---*- C++ -*-===//
#ifndef MOE_TOOLS_MOE_COMM_TEST_REPORT_H
#define MOE_TOOLS_MOE_COMM_TEST_REPORT_H

#include "moe/Runtime/Comm/Communicator.h"

#include <string>

namespace moe::commtest {

/// Every rank records every check in the same order; the verdicts are
/// summed over `everyone` (a group of all ranks), so that rank 0 can print
/// one line per check for the whole job. A failing rank prints its reason.
class Report {
public:
  Report(rt::comm::Group &everyone, int worldRank)
      : everyone_(everyone), worldRank_(worldRank) {}

  /// Records check `name`; `failure` is empty if it passed on this rank.
  /// An error means the verdict itself could not be collected.
  absl::Status check(const std::string &name, const std::string &failure);

  int passed() const { return passed_; }
  int failed() const { return failed_; }

private:
  rt::comm::Group &everyone_;
  int worldRank_;
  int passed_ = 0;
  int failed_ = 0;
};

} // namespace moe::commtest

#endif // MOE_TOOLS_MOE_COMM_TEST_REPORT_H
