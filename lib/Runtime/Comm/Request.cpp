//===- Request.cpp - progress of transfers, and waits with a deadline -----===//
#include "RequestState.h"

#include "moe/Runtime/Comm/Communicator.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <thread>

namespace moe::rt::comm {

namespace detail {

void WorldState::markBroken(const absl::Status &status) {
  std::lock_guard<std::mutex> lock(healthMutex_);
  if (broken_)
    return;
  broken_ = true;
  reason_ = std::string(status.message());
}

bool WorldState::broken() const {
  std::lock_guard<std::mutex> lock(healthMutex_);
  return broken_;
}

std::string WorldState::reason() const {
  std::lock_guard<std::mutex> lock(healthMutex_);
  return reason_;
}

void WorldState::remove(RequestState *state) {
  active_.erase(std::remove(active_.begin(), active_.end(), state),
                active_.end());
}

void WorldState::progressAll() {
  // progress() may end a request and take it out of active_.
  std::vector<RequestState *> inFlight = active_;
  for (RequestState *state : inFlight)
    if (!state->done)
      progress(*state);
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](RequestState *s) { return s->done; }),
                active_.end());
  if (prober_)
    prober_->serve(*this);
}

std::shared_ptr<GroupRecord>
WorldState::addGroup(std::string name, std::vector<int64_t> worldRanks) {
  auto record = std::make_shared<GroupRecord>();
  record->name = std::move(name);
  record->worldRanks = std::move(worldRanks);
  std::lock_guard<std::mutex> lock(groupsMutex_);
  record->id = static_cast<int64_t>(groups_.size());
  groups_.push_back(record);
  return record;
}

void WorldState::endWait(const RequestState *state) {
  auto it = std::find(waits_.begin(), waits_.end(), state);
  if (it != waits_.end())
    waits_.erase(it);
}

PeerState WorldState::describe(int64_t groupId) const {
  PeerState mine;
  {
    std::lock_guard<std::mutex> lock(groupsMutex_);
    if (groupId >= 0 && groupId < static_cast<int64_t>(groups_.size()))
      mine.entered = groups_[groupId]->entered.load();
  }
  // The oldest wait: a second one (another thread's) started later.
  if (!waits_.empty()) {
    const RequestState &wait = *waits_.front();
    mine.waiting = true;
    mine.waitGroup = wait.record ? wait.record->id : -1;
    mine.waitSequence = wait.sequence;
    mine.collective = wait.collective;
    mine.groupName = wait.group;
  }
  return mine;
}

namespace {
class AllOf final : public Operation {
public:
  explicit AllOf(std::vector<OperationPtr> operations)
      : operations_(std::move(operations)) {}

  absl::StatusOr<bool> test() override {
    bool all = true;
    for (OperationPtr &operation : operations_) {
      if (!operation)
        continue;
      absl::StatusOr<bool> complete = operation->test();
      if (!complete.ok())
        return complete.status();
      if (*complete)
        operation.reset();
      else
        all = false;
    }
    return all;
  }

private:
  std::vector<OperationPtr> operations_;
};
} // namespace

OperationPtr allOf(std::vector<OperationPtr> operations) {
  return std::make_unique<AllOf>(std::move(operations));
}

/// After a failure MPI may still write into the transfer's scratch buffers
/// (a late peer, a transfer that cannot be cancelled), so they are never
/// freed: the world is broken and the job is about to end anyway.
static void abandon(RequestState &state) {
  struct Abandoned {
    OperationPtr current;
    std::deque<Step> steps;
    std::vector<std::shared_ptr<void>> keepAlive;
  };
  new Abandoned{std::move(state.current), std::move(state.steps),
                std::move(state.keepAlive)};
}

void fail(RequestState &state, absl::Status status) {
  state.status = std::move(status);
  state.done = true;
  state.world->markBroken(state.status);
  abandon(state);
  state.world->remove(&state);
}

void progress(RequestState &state) {
  auto failWith = [&](const absl::Status &cause) {
    fail(state, absl::Status(cause.code(),
                             absl::StrCat(state.collective, " on group ",
                                          state.group, ": ", cause.message())));
  };
  while (!state.done) {
    if (state.current) {
      absl::StatusOr<bool> complete = state.current->test();
      if (!complete.ok())
        return failWith(complete.status());
      if (!*complete)
        return;
      state.current.reset();
    }
    if (state.steps.empty()) {
      state.done = true;
      state.keepAlive.clear();
      return;
    }
    Step step = std::move(state.steps.front());
    state.steps.pop_front();
    absl::StatusOr<OperationPtr> next = step();
    if (!next.ok())
      return failWith(next.status());
    state.current = std::move(*next);
  }
}

} // namespace detail

absl::StatusOr<absl::Duration> timeoutFromEnvironment() {
  const char *value = std::getenv("MOE_COMM_TIMEOUT_S");
  if (!value)
    return absl::Seconds(kDefaultTimeoutSeconds);
  double seconds = 0;
  if (!absl::SimpleAtod(value, &seconds) || !std::isfinite(seconds) ||
      seconds <= 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "MOE_COMM_TIMEOUT_S must be a positive number of seconds, got '", value,
        "'"));
  return absl::Seconds(seconds);
}

Request::Request() = default;

Request::Request(std::unique_ptr<detail::RequestState> state)
    : state_(std::move(state)) {
  std::lock_guard<std::mutex> lock(state_->world->progressMutex());
  state_->world->add(state_.get());
}

Request::Request(Request &&other) noexcept = default;

Request &Request::operator=(Request &&other) noexcept {
  if (this != &other) {
    finish();
    state_ = std::move(other.state_);
  }
  return *this;
}

Request::~Request() { finish(); }

void Request::finish() {
  if (!state_)
    return;
  // The transfer may still be writing into the caller's buffers; waiting
  // (with the deadline) is the only safe way to let go of it. A failure is
  // recorded in the world, which then ends the job instead of finalising.
  if (!done())
    (void)wait();
  std::lock_guard<std::mutex> lock(state_->world->progressMutex());
  state_->world->remove(state_.get());
  state_.reset();
}

bool Request::done() const {
  if (!state_)
    return true;
  std::lock_guard<std::mutex> lock(state_->world->progressMutex());
  return state_->done;
}

absl::StatusOr<bool> Request::test() {
  if (!state_)
    return true;
  std::lock_guard<std::mutex> lock(state_->world->progressMutex());
  state_->world->progressAll();
  if (!state_->done)
    return false;
  if (!state_->status.ok())
    return state_->status;
  return true;
}

/// Between two polls of a wait. Most transfers finish within microseconds,
/// so the first polls spin; then the core is yielded, and a long wait sleeps
/// briefly, so that ranks sharing cores (oversubscribed test jobs, or a peer
/// that is still computing) get to run.
static void pause(int polls, absl::Duration waited) {
  if (polls < 100)
    return;
  if (waited < absl::Milliseconds(2)) {
    std::this_thread::yield();
    return;
  }
  absl::SleepFor(absl::Microseconds(50));
}

namespace {
/// Marks a request as waited for, for the peers' probes, while in scope.
class WaitScope {
public:
  explicit WaitScope(detail::RequestState &state) : state_(state) {
    std::lock_guard<std::mutex> lock(state_.world->progressMutex());
    state_.world->beginWait(&state_);
  }
  ~WaitScope() {
    std::lock_guard<std::mutex> lock(state_.world->progressMutex());
    state_.world->endWait(&state_);
  }
  WaitScope(const WaitScope &) = delete;
  WaitScope &operator=(const WaitScope &) = delete;

private:
  detail::RequestState &state_;
};
} // namespace

/// Asks the other ranks what they are doing (Probe.h) while progressing
/// every request, `state` included, for at most the probe grace period;
/// returns what the answers say, or a guess without a probe channel.
static std::string probePeers(detail::RequestState &state) {
  const char *guess = "a peer may have died, hung or skipped this collective";
  detail::WorldState &world = *state.world;
  std::mutex &mutex = world.progressMutex();
  std::vector<std::optional<detail::PeerState>> answers;
  uint64_t round = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    detail::Prober *prober = world.prober();
    if (!prober || !state.record)
      return guess;
    answers.resize(prober->size());
    round = prober->ask(state.record->id);
  }
  int self = 0;
  absl::Duration grace = detail::probeGrace(state.timeout);
  absl::Time start = absl::Now();
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      detail::Prober *prober = world.prober();
      if (!prober)
        return guess;
      self = prober->rank();
      world.progressAll();
      prober->collect(round, answers);
      if (state.done)
        return "";
      int64_t answered = std::count_if(
          answers.begin(), answers.end(),
          [](const std::optional<detail::PeerState> &a) { return a.has_value(); });
      if (answered + 1 >= static_cast<int64_t>(answers.size()))
        break;
    }
    absl::Duration waited = absl::Now() - start;
    if (waited >= grace)
      break;
    pause(polls, waited);
  }
  detail::StuckWait wait;
  wait.groupId = state.record->id;
  wait.sequence = state.sequence;
  wait.peer = state.peer;
  wait.collective = state.collective;
  wait.members = state.record->worldRanks;
  wait.self = self;
  return detail::describePeers(wait, answers, grace);
}

absl::Status Request::wait() {
  if (!state_)
    return absl::OkStatus();
  detail::RequestState &s = *state_;
  WaitScope waiting(s);
  absl::Time start = absl::Now();
  for (int polls = 0;; ++polls) {
    absl::StatusOr<bool> complete = test();
    if (!complete.ok())
      return complete.status();
    if (*complete)
      return absl::OkStatus();
    absl::Duration waited = absl::Now() - start;
    if (waited >= s.timeout) {
      std::string peers = probePeers(s);
      std::lock_guard<std::mutex> lock(s.world->progressMutex());
      // It may have completed, or failed, while the peers were asked.
      if (s.done)
        return s.status;
      detail::fail(
          s,
          absl::DeadlineExceededError(absl::StrFormat(
              "%s on group %s (group rank %d) did not complete: waited "
              "%.1f s, the deadline (MOE_COMM_TIMEOUT_S) is %.1f s; %s",
              s.collective, s.group, s.groupRank, absl::ToDoubleSeconds(waited),
              absl::ToDoubleSeconds(s.timeout), peers)));
      return s.status;
    }
    pause(polls, waited);
  }
}

} // namespace moe::rt::comm
