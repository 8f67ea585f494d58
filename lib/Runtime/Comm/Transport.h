//===- Transport.h - the transfers a Group is built on ----------*- C++ -*-===//
//
// A Group implements its collectives (and their deterministic sums) once, on
// top of this small interface; MpiTransport moves the bytes between
// processes, LocalTransport serves groups of one rank without MPI. Every
// call starts a transfer and returns an Operation to poll. Counts and
// offsets are in elements of the call's DType (F32, I32 or BF16, whose
// elements are dtypeBytes() long) and already checked to fit MPI's int.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_COMM_TRANSPORT_H
#define MOE_LIB_RUNTIME_COMM_TRANSPORT_H

#include "moe/Runtime/Program.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <memory>
#include <string>
#include <vector>

namespace moe::rt::comm::detail {

/// A started transfer.
class Operation {
public:
  virtual ~Operation() = default;
  /// Makes progress; true once the transfer is complete and its buffers may
  /// be reused.
  virtual absl::StatusOr<bool> test() = 0;
};
using OperationPtr = std::unique_ptr<Operation>;

/// Point-to-point messages of the caller (Group::send/recv) and of the
/// layer's own algorithms travel on separate channels, so that a user's tag
/// can never match an internal message.
enum class Channel { User, Internal };

class Transport {
public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The largest tag a point-to-point message may carry.
  virtual int maxTag() const = 0;

  /// MPI_Ialltoallv. The count and offset vectors are owned by the
  /// operation because MPI reads them until the transfer completes.
  virtual absl::StatusOr<OperationPtr>
  allToAllV(DType type, const void *input, std::vector<int> sendCounts,
            std::vector<int> sendOffsets, void *output,
            std::vector<int> recvCounts, std::vector<int> recvOffsets) = 0;
  /// MPI_Iallgatherv; `input` == nullptr means in place (this rank's part
  /// is already at output + offsets[rank]).
  virtual absl::StatusOr<OperationPtr> allGatherV(DType type, const void *input,
                                                  int inputCount, void *output,
                                                  std::vector<int> counts,
                                                  std::vector<int> offsets) = 0;
  virtual absl::StatusOr<OperationPtr> broadcast(DType type, void *data,
                                                 int count, int root) = 0;
  virtual absl::StatusOr<OperationPtr> barrier() = 0;
  virtual absl::StatusOr<OperationPtr> send(Channel channel, DType type,
                                            const void *data, int count,
                                            int peer, int tag) = 0;
  /// Completes with an error unless exactly `count` elements arrive.
  virtual absl::StatusOr<OperationPtr> recv(Channel channel, DType type,
                                            void *data, int count, int peer,
                                            int tag) = 0;
};

/// A transport for a group of one rank: every transfer is a local copy.
std::unique_ptr<Transport> makeLocalTransport();

/// Completes once every one of `operations` has.
OperationPtr allOf(std::vector<OperationPtr> operations);

} // namespace moe::rt::comm::detail

#endif // MOE_LIB_RUNTIME_COMM_TRANSPORT_H
