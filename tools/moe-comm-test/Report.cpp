//===- Report.cpp - one verdict per check, agreed by every rank -----------===//
#include "Report.h"

#include <cstdio>

namespace moe::commtest {

absl::Status Report::check(const std::string &name,
                           const std::string &failure) {
  if (!failure.empty())
    std::fprintf(stderr, "moe-comm-test: rank %d: %s: %s\n", worldRank_,
                 name.c_str(), failure.c_str());
  int32_t failing = failure.empty() ? 0 : 1;
  if (absl::Status status = everyone_.allReduceSum(absl::MakeSpan(&failing, 1));
      !status.ok())
    return status;
  if (failing == 0)
    ++passed_;
  else
    ++failed_;
  if (worldRank_ == 0) {
    if (failing == 0)
      std::printf("PASS %s\n", name.c_str());
    else
      std::printf("FAIL %s (on %d of %d ranks)\n", name.c_str(), failing,
                  everyone_.size());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

} // namespace moe::commtest
