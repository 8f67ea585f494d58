//===- NcclExchange.cpp - one batch's MPI messages, polled ----------------===//
#include "NcclExchange.h"

#include "Comm/MpiSupport.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

namespace moe::rt::virtual_gpu::nccl {
namespace {

/// The most bytes one MPI message carries (its count is an int).
constexpr size_t kPieceBytes = size_t(1) << 30;

/// Between two polls of a batch's messages.
constexpr std::chrono::microseconds kPollInterval(20);

} // namespace

int messageTag(uint64_t sequence, int lane) {
  // MPI guarantees tags up to 32767 at least; four lanes leave 8191
  // sequences before a tag repeats.
  constexpr uint64_t kSequences = 32767 / 4;
  return static_cast<int>(sequence % kSequences) * 4 + lane;
}

Exchange::~Exchange() {
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL)
      continue;
    // A receive that will never be matched is cancelled, and waited for so
    // that nothing writes into its buffer later (a cancelled receive
    // completes locally); a send is left to complete (or not) on its own.
    if (pending[i].isReceive) {
      MPI_Cancel(&requests[i]);
      MPI_Wait(&requests[i], MPI_STATUS_IGNORE);
    } else {
      MPI_Request_free(&requests[i]);
    }
  }
}

void Exchange::started(int rc, const char *call, MPI_Request request, int peer,
                       bool isReceive) {
  if (rc != MPI_SUCCESS) {
    if (failure.ok())
      failure = comm::detail::mpiError(rc, call);
    return;
  }
  requests.push_back(request);
  pending.push_back({peer, isReceive, false});
}

void Exchange::send(const void *data, size_t bytes, int peer, int tag) {
  const char *from = static_cast<const char *>(data);
  do {
    size_t piece = std::min(bytes, kPieceBytes);
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Isend(from, static_cast<int>(piece), MPI_BYTE, peer, tag,
                       comm.mpi, &request);
    started(rc, "MPI_Isend", request, peer, /*isReceive=*/false);
    from += piece;
    bytes -= piece;
  } while (bytes > 0);
}

void Exchange::receive(void *data, size_t bytes, int peer, int tag) {
  char *into = static_cast<char *>(data);
  do {
    size_t piece = std::min(bytes, kPieceBytes);
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Irecv(into, static_cast<int>(piece), MPI_BYTE, peer, tag,
                       comm.mpi, &request);
    started(rc, "MPI_Irecv", request, peer, /*isReceive=*/true);
    into += piece;
    bytes -= piece;
  } while (bytes > 0);
}

absl::Status Exchange::wait() {
  if (!failure.ok())
    return failure;
  std::vector<int> completed(requests.size());
  size_t remaining = std::count_if(pending.begin(), pending.end(),
                                   [](const Pending &p) { return !p.done; });
  while (remaining > 0) {
    int count = 0;
    int rc = MPI_Testsome(static_cast<int>(requests.size()), requests.data(),
                          &count, completed.data(), MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
      return failure = comm::detail::mpiError(rc, "MPI_Testsome");
    if (count == MPI_UNDEFINED)
      break;
    for (int i = 0; i < count; ++i)
      pending[static_cast<size_t>(completed[i])].done = true;
    remaining -= static_cast<size_t>(count);
    if (remaining == 0)
      break;
    if (comm.aborted())
      return absl::AbortedError("aborted by ncclCommAbort");
    std::this_thread::sleep_for(kPollInterval);
  }
  return absl::OkStatus();
}

std::vector<int> Exchange::waitingFor() const {
  std::vector<int> peers;
  for (const Pending &p : pending)
    if (p.isReceive && !p.done)
      peers.push_back(p.peer);
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

} // namespace moe::rt::virtual_gpu::nccl
