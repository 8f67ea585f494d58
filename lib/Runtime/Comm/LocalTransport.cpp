//===- LocalTransport.cpp - transfers within a group of one rank ----------===//
//
// A group of one rank needs no MPI: collectives are copies, and a message
// to oneself is buffered in a mailbox until the matching receive.
//
//===----------------------------------------------------------------------===//
#include "Transport.h"

#include "absl/strings/str_cat.h"

#include <climits>
#include <cstring>
#include <deque>
#include <mutex>

namespace moe::rt::comm::detail {

namespace {

class Done final : public Operation {
public:
  absl::StatusOr<bool> test() override { return true; }
};

OperationPtr done() { return std::make_unique<Done>(); }

size_t bytesOf(DType type, int count) {
  return static_cast<size_t>(count) * dtypeBytes(type);
}

void copyElements(DType type, void *to, const void *from, int count) {
  if (count > 0 && to != from)
    std::memmove(to, from, bytesOf(type, count));
}

struct Message {
  Channel channel;
  int tag;
  std::vector<char> bytes;
};

struct Mailbox {
  std::mutex mutex;
  std::deque<Message> messages;
};

/// A receive completes when a message with its channel and tag is in the
/// mailbox (messages with one tag are taken in the order sent, like MPI).
class LocalRecv final : public Operation {
public:
  LocalRecv(std::shared_ptr<Mailbox> mailbox, Channel channel, DType type,
            void *data, int count, int tag)
      : mailbox_(std::move(mailbox)), channel_(channel), type_(type),
        data_(data), count_(count), tag_(tag) {}

  absl::StatusOr<bool> test() override {
    std::lock_guard<std::mutex> lock(mailbox_->mutex);
    for (auto it = mailbox_->messages.begin(); it != mailbox_->messages.end();
         ++it) {
      if (it->channel != channel_ || it->tag != tag_)
        continue;
      size_t expected = bytesOf(type_, count_);
      if (it->bytes.size() != expected)
        return absl::InvalidArgumentError(
            absl::StrCat("received ", it->bytes.size() / dtypeBytes(type_),
                         " elements from group rank 0 (tag ", tag_,
                         ") but expected ", count_));
      if (count_ > 0)
        std::memcpy(data_, it->bytes.data(), expected);
      mailbox_->messages.erase(it);
      return true;
    }
    return false;
  }

private:
  std::shared_ptr<Mailbox> mailbox_;
  Channel channel_;
  DType type_;
  void *data_;
  int count_;
  int tag_;
};

class LocalTransport final : public Transport {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int maxTag() const override { return INT_MAX; }

  absl::StatusOr<OperationPtr>
  allToAllV(DType type, const void *input, std::vector<int> sendCounts,
            std::vector<int> sendOffsets, void *output,
            std::vector<int> recvCounts,
            std::vector<int> recvOffsets) override {
    if (sendCounts[0] != recvCounts[0])
      return absl::InvalidArgumentError(absl::StrCat(
          "this rank sends ", sendCounts[0],
          " elements to itself but expects to receive ", recvCounts[0]));
    copyElements(type,
                 static_cast<char *>(output) + bytesOf(type, recvOffsets[0]),
                 static_cast<const char *>(input) +
                     bytesOf(type, sendOffsets[0]),
                 sendCounts[0]);
    return done();
  }

  absl::StatusOr<OperationPtr> allGatherV(DType type, const void *input,
                                          int inputCount, void *output,
                                          std::vector<int> counts,
                                          std::vector<int> offsets) override {
    if (input)
      copyElements(type,
                   static_cast<char *>(output) + bytesOf(type, offsets[0]),
                   input, inputCount);
    return done();
  }

  absl::StatusOr<OperationPtr> broadcast(DType, void *, int, int) override {
    return done();
  }

  absl::StatusOr<OperationPtr> barrier() override { return done(); }

  absl::StatusOr<OperationPtr> send(Channel channel, DType type,
                                    const void *data, int count, int,
                                    int tag) override {
    // Buffered: the bytes are copied now, so the send is complete at once.
    Message message{channel, tag, {}};
    message.bytes.resize(bytesOf(type, count));
    if (count > 0)
      std::memcpy(message.bytes.data(), data, message.bytes.size());
    std::lock_guard<std::mutex> lock(mailbox_->mutex);
    mailbox_->messages.push_back(std::move(message));
    return done();
  }

  absl::StatusOr<OperationPtr> recv(Channel channel, DType type, void *data,
                                    int count, int, int tag) override {
    return std::make_unique<LocalRecv>(mailbox_, channel, type, data, count,
                                       tag);
  }

private:
  std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
};

} // namespace

std::unique_ptr<Transport> makeLocalTransport() {
  return std::make_unique<LocalTransport>();
}

} // namespace moe::rt::comm::detail
