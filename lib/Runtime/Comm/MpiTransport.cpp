//===- MpiTransport.cpp - transfers between processes with MPI ------------===//
//
// Every transfer is one nonblocking MPI call; the layer never calls MPI's
// reductions (see Communicator.h on determinism).
//
//===----------------------------------------------------------------------===//
#include "MpiSupport.h"

#include "absl/strings/str_cat.h"

#include <climits>

namespace moe::rt::comm::detail {

namespace {

/// MPI rejects some null buffers even for zero counts; any valid address
/// will do then, since nothing is read or written.
char emptyBuffer[kMaxDTypeBytes];

void *orEmpty(void *data) { return data ? data : emptyBuffer; }
const void *orEmpty(const void *data) { return data ? data : emptyBuffer; }

class MpiOperation final : public Operation {
public:
  explicit MpiOperation(const char *call) : call_(call) {}

  /// An active request cannot be freed or cancelled when it belongs to a
  /// nonblocking collective, so an abandoned one is left to MPI (the world
  /// is broken then; see RequestState).
  ~MpiOperation() override = default;

  MPI_Request *request() { return &request_; }
  /// Count vectors MPI reads until completion. The returned vector's data()
  /// stays put when kept_ grows, since moving a vector keeps its buffer.
  std::vector<int> &keep(std::vector<int> values) {
    kept_.push_back(std::move(values));
    return kept_.back();
  }
  void expectCount(MPI_Datatype type, int count, int peer, int tag) {
    checkCount_ = true;
    type_ = type;
    expected_ = count;
    peer_ = peer;
    tag_ = tag;
  }

  absl::StatusOr<bool> test() override {
    if (request_ == MPI_REQUEST_NULL)
      return true;
    int flag = 0;
    MPI_Status status;
    if (int rc = MPI_Test(&request_, &flag, &status); rc != MPI_SUCCESS)
      return mpiError(rc, call_);
    if (!flag)
      return false;
    if (checkCount_) {
      int received = 0;
      if (int rc = MPI_Get_count(&status, type_, &received); rc != MPI_SUCCESS)
        return mpiError(rc, "MPI_Get_count");
      if (received != expected_)
        return absl::InvalidArgumentError(
            absl::StrCat("received ", received, " elements from group rank ",
                         peer_, " (tag ", tag_, ") but expected ", expected_));
    }
    return true;
  }

private:
  const char *call_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::vector<std::vector<int>> kept_;
  bool checkCount_ = false;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  int expected_ = 0, peer_ = 0, tag_ = 0;
};

/// Starts `operation` with `rc`, the return code of its MPI call.
absl::StatusOr<OperationPtr> started(std::unique_ptr<MpiOperation> operation,
                                     int rc, const char *call) {
  if (rc != MPI_SUCCESS)
    return mpiError(rc, call);
  return OperationPtr(std::move(operation));
}

class MpiTransport final : public Transport {
public:
  MpiTransport(MPI_Comm comm, MPI_Comm internal)
      : comm_(comm), internal_(internal) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // MPI guarantees at least 32767; Open MPI offers much more.
    int *tagUpperBound = nullptr;
    int found = 0;
    if (MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tagUpperBound, &found) ==
            MPI_SUCCESS &&
        found && tagUpperBound)
      maxTag_ = *tagUpperBound;
  }

  ~MpiTransport() override {
    // Freeing after MPI_Finalize is erroneous; a World that finalised early
    // has let go of every communicator anyway.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      return;
    if (comm_ != MPI_COMM_WORLD)
      MPI_Comm_free(&comm_);
    MPI_Comm_free(&internal_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int maxTag() const override { return maxTag_; }

  absl::StatusOr<OperationPtr>
  allToAllV(DType type, const void *input, std::vector<int> sendCounts,
            std::vector<int> sendOffsets, void *output,
            std::vector<int> recvCounts,
            std::vector<int> recvOffsets) override {
    auto operation = std::make_unique<MpiOperation>("MPI_Ialltoallv");
    const int *sc = operation->keep(std::move(sendCounts)).data();
    const int *so = operation->keep(std::move(sendOffsets)).data();
    const int *rc = operation->keep(std::move(recvCounts)).data();
    const int *ro = operation->keep(std::move(recvOffsets)).data();
    int code =
        MPI_Ialltoallv(orEmpty(input), sc, so, mpiType(type), orEmpty(output),
                       rc, ro, mpiType(type), comm_, operation->request());
    return started(std::move(operation), code, "MPI_Ialltoallv");
  }

  absl::StatusOr<OperationPtr> allGatherV(DType type, const void *input,
                                          int inputCount, void *output,
                                          std::vector<int> counts,
                                          std::vector<int> offsets) override {
    auto operation = std::make_unique<MpiOperation>("MPI_Iallgatherv");
    const int *c = operation->keep(std::move(counts)).data();
    const int *o = operation->keep(std::move(offsets)).data();
    const void *send = input ? input : MPI_IN_PLACE;
    int code =
        MPI_Iallgatherv(send, inputCount, mpiType(type), orEmpty(output), c, o,
                        mpiType(type), comm_, operation->request());
    return started(std::move(operation), code, "MPI_Iallgatherv");
  }

  absl::StatusOr<OperationPtr> broadcast(DType type, void *data, int count,
                                         int root) override {
    auto operation = std::make_unique<MpiOperation>("MPI_Ibcast");
    int code = MPI_Ibcast(orEmpty(data), count, mpiType(type), root, comm_,
                          operation->request());
    return started(std::move(operation), code, "MPI_Ibcast");
  }

  absl::StatusOr<OperationPtr> barrier() override {
    auto operation = std::make_unique<MpiOperation>("MPI_Ibarrier");
    int code = MPI_Ibarrier(comm_, operation->request());
    return started(std::move(operation), code, "MPI_Ibarrier");
  }

  absl::StatusOr<OperationPtr> send(Channel channel, DType type,
                                    const void *data, int count, int peer,
                                    int tag) override {
    auto operation = std::make_unique<MpiOperation>("MPI_Isend");
    int code = MPI_Isend(orEmpty(data), count, mpiType(type), peer, tag,
                         commOf(channel), operation->request());
    return started(std::move(operation), code, "MPI_Isend");
  }

  absl::StatusOr<OperationPtr> recv(Channel channel, DType type, void *data,
                                    int count, int peer, int tag) override {
    auto operation = std::make_unique<MpiOperation>("MPI_Irecv");
    operation->expectCount(mpiType(type), count, peer, tag);
    int code = MPI_Irecv(orEmpty(data), count, mpiType(type), peer, tag,
                         commOf(channel), operation->request());
    return started(std::move(operation), code, "MPI_Irecv");
  }

private:
  MPI_Comm commOf(Channel channel) const {
    return channel == Channel::User ? comm_ : internal_;
  }

  MPI_Comm comm_;
  MPI_Comm internal_;
  int rank_ = 0;
  int size_ = 1;
  int maxTag_ = 32767;
};

} // namespace

std::unique_ptr<Transport> makeMpiTransport(MPI_Comm comm, MPI_Comm internal) {
  return std::make_unique<MpiTransport>(comm, internal);
}

} // namespace moe::rt::comm::detail
