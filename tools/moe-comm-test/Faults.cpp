//===- Faults.cpp - injected failures, for the error-path tests -----------===//
#include "Faults.h"

#include "absl/strings/str_cat.h"

#include <cstdio>
#include <vector>

namespace moe::commtest {

absl::Status injectFault(const std::string &name, int faultRank,
                         rt::comm::Group &everyone, int worldRank) {
  if (name == "skip-collective") {
    std::vector<float> data(16, 1.0f);
    if (worldRank == faultRank) {
      std::fprintf(stderr,
                   "moe-comm-test: rank %d skips an allReduceSum and waits "
                   "for a message instead (injected fault)\n",
                   worldRank);
      // A message that never comes, on the same group (a collective there
      // would be matched against the skipped one by MPI). It waits longer
      // than its peers, so that their probes find it waiting.
      everyone.setTimeout(everyone.timeout() * 3);
      return everyone.recv(absl::MakeSpan(data), faultRank == 0 ? 1 : 0);
    }
    return everyone.allReduceSum(absl::MakeSpan(data));
  }
  if (name == "short-recv" || name == "long-recv") {
    if (everyone.size() < 2 || faultRank == 0)
      return absl::InvalidArgumentError(
          absl::StrCat("fault ", name, " needs 2 ranks and --fault-rank > 0"));
    bool shortRecv = name == "short-recv";
    if (worldRank == 0) {
      std::vector<float> data(shortRecv ? 8 : 4, 2.0f);
      return everyone.send(data, faultRank);
    }
    if (worldRank == faultRank) {
      std::vector<float> data(shortRecv ? 4 : 8);
      return everyone.recv(absl::MakeSpan(data), 0);
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown fault '", name, "' (expected one of: ", kFaultNames, ")"));
}

} // namespace moe::commtest
