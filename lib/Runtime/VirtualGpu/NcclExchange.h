//===- NcclExchange.h - one batch's MPI messages, polled --------*- C++ -*-===//
//
// Private to the NCCL emulation. The messages a batch trades with its peers
// are non-blocking MPI sends and receives, polled together (MPI_Testsome)
// rather than waited for, so that ncclCommAbort stops a batch whose peer
// never arrives: a dead peer leaves the batch waiting until the abort, as
// NCCL's kernel would spin, and no longer.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_NCCLEXCHANGE_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_NCCLEXCHANGE_H

#include "NcclState.h"

#include "absl/status/status.h"

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace moe::rt::virtual_gpu::nccl {

class Exchange {
public:
  explicit Exchange(const Communicator &comm) : comm(comm) {}
  /// Frees the messages still pending (after an abort or a failure).
  ~Exchange();
  Exchange(const Exchange &) = delete;
  Exchange &operator=(const Exchange &) = delete;

  /// Starts sending (receiving) `bytes` to (from) rank `peer` of the
  /// communicator with `tag`; large messages travel in pieces.
  void send(const void *data, size_t bytes, int peer, int tag);
  void receive(void *data, size_t bytes, int peer, int tag);

  /// Waits for every message started so far. OK when they completed; an
  /// Aborted error when the communicator was aborted first (then
  /// waitingFor() names the peers still to be heard from); an Internal
  /// error for an MPI failure.
  absl::Status wait();
  /// The ranks whose messages to this one had not arrived when wait()
  /// stopped, in rank order.
  std::vector<int> waitingFor() const;

private:
  void started(int rc, const char *call, MPI_Request request, int peer,
               bool isReceive);

  const Communicator &comm;
  std::vector<MPI_Request> requests;
  /// Per request: its peer, whether it receives, and whether it is done.
  struct Pending {
    int peer;
    bool isReceive;
    bool done;
  };
  std::vector<Pending> pending;
  absl::Status failure;
};

/// The tag of a batch's messages: collective `sequence`'s (lane 0), the
/// data of send `sequence` on a pair of ranks (lane 1) and the receiver's
/// answer to it (lane 2). Sequences wrap far beyond any batch in flight.
int messageTag(uint64_t sequence, int lane);

} // namespace moe::rt::virtual_gpu::nccl

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_NCCLEXCHANGE_H
