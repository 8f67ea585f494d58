//===- Faults.h - injected failures, for the error-path tests ---*- C++ -*-===//
#ifndef MOE_TOOLS_MOE_COMM_TEST_FAULTS_H
#define MOE_TOOLS_MOE_COMM_TEST_FAULTS_H

#include "moe/Runtime/Comm/Communicator.h"

#include <string>

namespace moe::commtest {

/// The names --fault accepts, for the usage text.
inline constexpr const char *kFaultNames =
    "skip-collective, short-recv, long-recv";

/// Runs fault `name` on `everyone` (all ranks), `faultRank` being the rank
/// that misbehaves:
///  skip-collective: every rank but faultRank joins an allReduceSum;
///    faultRank waits for a message that never comes instead (with a longer
///    deadline); the others must fail with a deadline error that says it
///    has not reached the collective and what it waits for;
///  short-recv: rank 0 sends 8 floats, faultRank receives into 4 (MPI's
///    truncation error);
///  long-recv: rank 0 sends 4 floats, faultRank expects 8.
/// Returns this rank's error (OK for ranks that did their part).
absl::Status injectFault(const std::string &name, int faultRank,
                         rt::comm::Group &everyone, int worldRank);

} // namespace moe::commtest

#endif // MOE_TOOLS_MOE_COMM_TEST_FAULTS_H
