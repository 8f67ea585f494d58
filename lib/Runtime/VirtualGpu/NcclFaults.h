//===- NcclFaults.h - faults injected into the NCCL emulation ---*- C++ -*-===//
//
// MOE_VIRTUAL_GPU_NCCL_FAULTS makes the virtual GPU's NCCL fail as a real
// job's does, so that the backend's deadline and abort paths run in tests.
// It is a comma-separated list of settings:
//
//   in-progress=N   every non-blocking ncclCommInitRankConfig and
//                   ncclCommSplit answers ncclInProgress to N more
//                   ncclCommGetAsyncError polls before it settles (it always
//                   returns ncclInProgress first);
//   hang-rank=R     the process of MPI_COMM_WORLD rank R (0 without MPI)
//                   never arrives at its operation number `at`: its work
//                   blocks as a dead peer's would, until ncclCommAbort, and
//                   its peers wait for it;
//   fail-rank=R     that process fails its operation number `at`: its
//                   communicator's asynchronous error becomes
//                   ncclSystemError, and its peers' ncclRemoteError;
//   at=K            the operation hang-rank or fail-rank (the last one
//                   before it) applies to, from 1 (default 1).
//
// Operations are counted per process over all its communicators: each
// ungrouped collective, send or receive is one, and so are the calls of one
// ncclGroupStart/ncclGroupEnd on one communicator. The variable is read at
// each ncclCommInitRankConfig and ncclCommSplit; when it changed, counting
// starts again. Example: "in-progress=3,hang-rank=1,at=5". The faults are
// deterministic: the same setting fails the same operation on every run.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_NCCLFAULTS_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_NCCLFAULTS_H

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::rt::virtual_gpu::nccl {

/// What the faults make of one operation.
enum class InjectedFault { None, Hang, Fail };

/// A parsed MOE_VIRTUAL_GPU_NCCL_FAULTS.
struct FaultPlan {
  struct RankFault {
    InjectedFault fault;
    int rank;
    uint64_t at;
  };
  int inProgress = 0;
  std::vector<RankFault> rankFaults;
};

/// The plan `spec` spells, or an error naming the setting it cannot read.
absl::StatusOr<FaultPlan> parseFaultPlan(absl::string_view spec);

/// Re-reads MOE_VIRTUAL_GPU_NCCL_FAULTS (at init and split); an error for a
/// setting it cannot read.
absl::Status reloadFaults();
/// The extra ncclInProgress answers of a new non-blocking communicator.
int extraInProgressPolls();
/// Counts one operation of this process and says what happens to it;
/// `why` then describes the injected fault.
InjectedFault nextOperationFault(std::string &why);

} // namespace moe::rt::virtual_gpu::nccl

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_NCCLFAULTS_H
