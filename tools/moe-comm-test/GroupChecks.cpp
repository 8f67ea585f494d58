//===- GroupChecks.cpp - every collective on one group, checked -----------===//
//
// Each check runs one collective on data that any rank can recompute for
// any other rank (TestData.h) and compares the result bitwise with what it
// computes locally, including the exact rank-order sums the layer promises.
//
//===----------------------------------------------------------------------===//
#include "GroupChecks.h"
#include "TestData.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <type_traits>

namespace moe::commtest {

using rt::comm::Request;

namespace {

/// The result of one check: a communication error, or "" (passed) or the
/// reason it failed.
using Outcome = absl::StatusOr<std::string>;

int64_t n(const GroupUnderTest &g) {
  return static_cast<int64_t>(g.members.size());
}

/// This rank's index in the group, as the mesh says.
int64_t me(const GroupUnderTest &g) {
  return std::find(g.members.begin(), g.members.end(), g.worldRank) -
         g.members.begin();
}

/// The salt of check `id` on this group: distinct data for every check.
uint64_t saltOf(const GroupUnderTest &g, uint64_t id) {
  uint64_t h = id;
  for (char c : g.label)
    h = mix(h ^ static_cast<unsigned char>(c));
  return h;
}

/// The fixed-order sum the layer promises: members' values added in group
/// rank order, element by element (BF16: in fp32, rounded once).
template <typename T>
std::vector<T> serialSum(const GroupUnderTest &g, int64_t first, int64_t count,
                         uint64_t salt) {
  if constexpr (std::is_same_v<T, rt::comm::Bf16>) {
    std::vector<std::vector<T>> rows;
    for (int64_t member : g.members)
      rows.push_back(valuesOf<T>(member, first, count, salt));
    return bf16Sum(rows);
  } else {
    std::vector<T> sum = valuesOf<T>(g.members[0], first, count, salt);
    for (int64_t r = 1; r < n(g); ++r) {
      std::vector<T> x = valuesOf<T>(g.members[r], first, count, salt);
      for (int64_t i = 0; i < count; ++i)
        sum[i] = add(sum[i], x[i]);
    }
    return sum;
  }
}

Outcome checkMembership(const GroupUnderTest &g) {
  rt::comm::Group &group = g.group;
  if (group.size() != n(g))
    return absl::StrCat("size ", group.size(), ", expected ", n(g));
  if (group.rank() != me(g))
    return absl::StrCat("rank ", group.rank(), ", expected ", me(g));
  if (group.worldRanks() != g.members)
    return std::string("worldRanks() differ from the mesh's group");
  // What MPI really did: every rank reports its world rank.
  std::vector<int32_t> mine = {static_cast<int32_t>(g.worldRank)};
  std::vector<int32_t> all(n(g));
  if (absl::Status status = group.allGather(mine, absl::MakeSpan(all));
      !status.ok())
    return status;
  std::vector<int32_t> expected(g.members.begin(), g.members.end());
  return firstMismatch(all, expected);
}

template <typename T>
Outcome checkAllReduce(const GroupUnderTest &g, int64_t count, uint64_t salt,
                       std::vector<T> *result = nullptr) {
  std::vector<T> data = valuesOf<T>(g.worldRank, 0, count, salt);
  if (absl::Status status = g.group.allReduceSum(absl::MakeSpan(data));
      !status.ok())
    return status;
  if (result)
    *result = data;
  return firstMismatch(data, serialSum<T>(g, 0, count, salt));
}

/// Gathers `mine` from every rank and compares the bits of every copy.
Outcome checkIdentical(const GroupUnderTest &g,
                       const std::vector<float> &mine) {
  std::vector<float> all(mine.size() * n(g));
  if (absl::Status status = g.group.allGather(mine, absl::MakeSpan(all));
      !status.ok())
    return status;
  for (int64_t r = 0; r < n(g); ++r)
    if (std::memcmp(all.data() + r * mine.size(), mine.data(),
                    mine.size() * sizeof(float)) != 0)
      return absl::StrCat("group rank ", r,
                          "'s result differs from this rank's");
  return std::string();
}

template <typename T>
Outcome checkAllGather(const GroupUnderTest &g, int64_t count, uint64_t salt,
                       bool inPlace) {
  std::vector<T> input = valuesOf<T>(g.worldRank, 0, count, salt);
  std::vector<T> output(count * n(g));
  absl::Status status;
  if (inPlace) {
    std::copy(input.begin(), input.end(), output.begin() + me(g) * count);
    status = g.group.allGather(
        absl::MakeConstSpan(output.data() + me(g) * count, count),
        absl::MakeSpan(output));
  } else {
    status = g.group.allGather(input, absl::MakeSpan(output));
  }
  if (!status.ok())
    return status;
  std::vector<T> expected;
  for (int64_t member : g.members) {
    std::vector<T> part = valuesOf<T>(member, 0, count, salt);
    expected.insert(expected.end(), part.begin(), part.end());
  }
  return firstMismatch(output, expected);
}

template <typename T>
Outcome checkReduceScatter(const GroupUnderTest &g, int64_t count,
                           uint64_t salt) {
  std::vector<T> input = valuesOf<T>(g.worldRank, 0, count * n(g), salt);
  std::vector<T> output(count);
  if (absl::Status status =
          g.group.reduceScatterSum(input, absl::MakeSpan(output));
      !status.ok())
    return status;
  return firstMismatch(output, serialSum<T>(g, me(g) * count, count, salt));
}

/// How many elements world rank `from` sends world rank `to` (0 to 5).
int64_t dispatchCount(int64_t from, int64_t to, uint64_t salt) {
  return static_cast<int64_t>(mix(salt ^ mix(from * 131 + to * 7919)) % 6);
}

Outcome checkExchangeCounts(const GroupUnderTest &g, uint64_t salt) {
  std::vector<int64_t> sendCounts(n(g));
  for (int64_t j = 0; j < n(g); ++j)
    sendCounts[j] = dispatchCount(g.worldRank, g.members[j], salt);
  absl::StatusOr<std::vector<int64_t>> recvCounts =
      g.group.exchangeCounts(sendCounts);
  if (!recvCounts.ok())
    return recvCounts.status();
  for (int64_t i = 0; i < n(g); ++i)
    if ((*recvCounts)[i] != dispatchCount(g.members[i], g.worldRank, salt))
      return absl::StrCat("rank ", i, " sends ", (*recvCounts)[i],
                          " elements, expected ",
                          dispatchCount(g.members[i], g.worldRank, salt));
  return std::string();
}

/// Expert-dispatch style: variable counts (zeros included), send regions
/// with gaps, receive regions in reverse rank order with gaps that must stay
/// untouched.
template <typename T>
Outcome checkAllToAll(const GroupUnderTest &g, uint64_t salt) {
  const int64_t stride = 4096;
  std::vector<int64_t> sendCounts(n(g)), sendOffsets(n(g));
  int64_t end = 0;
  for (int64_t j = 0; j < n(g); ++j) {
    sendCounts[j] = dispatchCount(g.worldRank, g.members[j], salt);
    sendOffsets[j] = end;
    end += sendCounts[j] + 1;
  }
  std::vector<T> input(end);
  for (int64_t j = 0; j < n(g); ++j)
    for (int64_t k = 0; k < sendCounts[j]; ++k)
      input[sendOffsets[j] + k] =
          valueOf<T>(g.worldRank, g.members[j] * stride + k, salt);

  absl::StatusOr<std::vector<int64_t>> recvCounts =
      g.group.exchangeCounts(sendCounts);
  if (!recvCounts.ok())
    return recvCounts.status();
  std::vector<int64_t> recvOffsets(n(g));
  end = 1;
  for (int64_t i = n(g); i-- > 0;) {
    recvOffsets[i] = end;
    end += (*recvCounts)[i] + 2;
  }
  const T sentinel = untouched<T>();
  std::vector<T> output(end, sentinel);
  if (absl::Status status =
          g.group.allToAll(input, sendCounts, sendOffsets,
                           absl::MakeSpan(output), *recvCounts, recvOffsets);
      !status.ok())
    return status;

  std::vector<T> expected(end, sentinel);
  for (int64_t i = 0; i < n(g); ++i)
    for (int64_t k = 0; k < (*recvCounts)[i]; ++k)
      expected[recvOffsets[i] + k] =
          valueOf<T>(g.members[i], g.worldRank * stride + k, salt);
  return firstMismatch(output, expected);
}

/// A ring (to the next rank, from the previous) with two tags, the second
/// message received first: what pipeline stages do.
template <typename T>
Outcome checkSendRecv(const GroupUnderTest &g, int64_t count, uint64_t salt) {
  int next = static_cast<int>((me(g) + 1) % n(g));
  int prev = static_cast<int>((me(g) + n(g) - 1) % n(g));
  std::vector<T> big = valuesOf<T>(g.worldRank, 0, count, salt);
  std::vector<T> small = valuesOf<T>(g.worldRank, count, 3, salt);
  std::vector<T> gotBig(count), gotSmall(3);
  absl::StatusOr<Request> recvSmall =
      g.group.startRecv(absl::MakeSpan(gotSmall), prev, 2);
  if (!recvSmall.ok())
    return recvSmall.status();
  absl::StatusOr<Request> recvBig =
      g.group.startRecv(absl::MakeSpan(gotBig), prev, 1);
  if (!recvBig.ok())
    return recvBig.status();
  absl::StatusOr<Request> sendBig = g.group.startSend(big, next, 1);
  if (!sendBig.ok())
    return sendBig.status();
  absl::StatusOr<Request> sendSmall = g.group.startSend(small, next, 2);
  if (!sendSmall.ok())
    return sendSmall.status();
  for (Request *r : {&*recvSmall, &*recvBig, &*sendBig, &*sendSmall})
    if (absl::Status status = r->wait(); !status.ok())
      return status;
  std::string failure =
      firstMismatch(gotBig, valuesOf<T>(g.members[prev], 0, count, salt));
  if (failure.empty())
    failure =
        firstMismatch(gotSmall, valuesOf<T>(g.members[prev], count, 3, salt));
  return failure;
}

template <typename T>
Outcome checkBroadcast(const GroupUnderTest &g, int64_t count, int root,
                       uint64_t salt) {
  std::vector<T> data(count, untouched<T>());
  if (me(g) == root)
    data = valuesOf<T>(g.worldRank, 0, count, salt);
  if (absl::Status status = g.group.broadcast(absl::MakeSpan(data), root);
      !status.ok())
    return status;
  return firstMismatch(data, valuesOf<T>(g.members[root], 0, count, salt));
}

Outcome checkBarrier(const GroupUnderTest &g) {
  if (absl::Status status = g.group.barrier(); !status.ok())
    return status;
  return std::string();
}

/// Three requests in flight at once, polled in a rank-dependent pattern and
/// waited in reverse order: each rank runs the later phases of the two
/// all-reduces at different moments, which must not mix their messages up.
Outcome checkConcurrent(const GroupUnderTest &g, int64_t count, uint64_t salt) {
  std::vector<float> a = valuesOf<float>(g.worldRank, 0, count, salt);
  std::vector<int32_t> bIn = valuesOf<int32_t>(g.worldRank, 0, 17, salt + 1);
  std::vector<int32_t> bOut(17 * n(g));
  std::vector<float> c = valuesOf<float>(g.worldRank, 0, 31, salt + 2);
  absl::StatusOr<Request> ra = g.group.startAllReduceSum(absl::MakeSpan(a));
  if (!ra.ok())
    return ra.status();
  absl::StatusOr<Request> rb =
      g.group.startAllGather(bIn, absl::MakeSpan(bOut));
  if (!rb.ok())
    return rb.status();
  absl::StatusOr<Request> rc = g.group.startAllReduceSum(absl::MakeSpan(c));
  if (!rc.ok())
    return rc.status();
  for (int64_t i = 0; i < (g.worldRank % 3) * 50; ++i) {
    if (absl::StatusOr<bool> done = ra->test(); !done.ok())
      return done.status();
    if (absl::StatusOr<bool> done = rc->test(); !done.ok())
      return done.status();
  }
  for (Request *r : {&*rc, &*rb, &*ra})
    if (absl::Status status = r->wait(); !status.ok())
      return status;
  std::string failure = firstMismatch(a, serialSum<float>(g, 0, count, salt));
  if (failure.empty())
    failure = firstMismatch(c, serialSum<float>(g, 0, 31, salt + 2));
  if (failure.empty()) {
    std::vector<int32_t> expected;
    for (int64_t member : g.members) {
      std::vector<int32_t> part = valuesOf<int32_t>(member, 0, 17, salt + 1);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    failure = firstMismatch(bOut, expected);
  }
  return failure;
}

/// Rank 0 finishes an all-reduce before it sends the others a token; they
/// wait for the token first. Their all-reduce must advance meanwhile (its
/// second phase is started by the layer's progress, not by a wait on it),
/// or rank 0 would wait forever.
Outcome checkProgressWhileWaitingElsewhere(const GroupUnderTest &g,
                                           int64_t count, uint64_t salt) {
  std::vector<float> data = valuesOf<float>(g.worldRank, 0, count, salt);
  absl::StatusOr<Request> sum = g.group.startAllReduceSum(absl::MakeSpan(data));
  if (!sum.ok())
    return sum.status();
  std::vector<int32_t> token = {static_cast<int32_t>(me(g))};
  if (me(g) == 0) {
    if (absl::Status status = sum->wait(); !status.ok())
      return status;
    for (int peer = 1; peer < n(g); ++peer)
      if (absl::Status status = g.group.send(token, peer, 9); !status.ok())
        return status;
  } else {
    if (absl::Status status = g.group.recv(absl::MakeSpan(token), 0, 9);
        !status.ok())
      return status;
    if (absl::Status status = sum->wait(); !status.ok())
      return status;
  }
  std::string failure =
      firstMismatch(data, serialSum<float>(g, 0, count, salt));
  if (failure.empty() && token[0] != 0)
    failure = absl::StrCat("token ", token[0], ", expected 0");
  return failure;
}

absl::Status record(Report &report, const std::string &name,
                    const Outcome &outcome) {
  if (!outcome.ok())
    return outcome.status();
  return report.check(name, *outcome);
}

} // namespace

absl::Status checkGroup(const GroupUnderTest &g, Report &report) {
  const std::string &l = g.label;
  const int64_t count = g.count;
  auto run = [&](const std::string &name, const Outcome &outcome) {
    return record(report, absl::StrCat(l, " ", name), outcome);
  };
  std::vector<std::pair<std::string, std::function<Outcome()>>> checks;
  checks.push_back({"membership", [&] { return checkMembership(g); }});
  for (int64_t c : {int64_t(0), int64_t(1), int64_t(5), count})
    checks.push_back({absl::StrCat("allReduceSum f32 x", c), [&g, c] {
                        return checkAllReduce<float>(g, c, saltOf(g, 1));
                      }});
  checks.push_back({absl::StrCat("allReduceSum f32 x", count,
                                 " bitwise identical on every rank"),
                    [&]() -> Outcome {
                      std::vector<float> result;
                      Outcome sum = checkAllReduce<float>(
                          g, count, saltOf(g, 2), &result);
                      if (!sum.ok() || !sum->empty())
                        return sum;
                      return checkIdentical(g, result);
                    }});
  checks.push_back({absl::StrCat("allReduceSum i32 x", count), [&] {
                      return checkAllReduce<int32_t>(g, count, saltOf(g, 3));
                    }});
  checks.push_back({"allGather f32 x333", [&] {
                      return checkAllGather<float>(g, 333, saltOf(g, 4), false);
                    }});
  checks.push_back(
      {"allGather i32 x333 in place",
       [&] { return checkAllGather<int32_t>(g, 333, saltOf(g, 5), true); }});
  checks.push_back({"reduceScatterSum f32 x257 per rank", [&] {
                      return checkReduceScatter<float>(g, 257, saltOf(g, 6));
                    }});
  checks.push_back({"reduceScatterSum i32 x257 per rank", [&] {
                      return checkReduceScatter<int32_t>(g, 257, saltOf(g, 7));
                    }});
  checks.push_back(
      {"exchangeCounts", [&] { return checkExchangeCounts(g, saltOf(g, 8)); }});
  checks.push_back({"allToAll f32 variable counts",
                    [&] { return checkAllToAll<float>(g, saltOf(g, 9)); }});
  checks.push_back({"allToAll i32 variable counts",
                    [&] { return checkAllToAll<int32_t>(g, saltOf(g, 10)); }});
  checks.push_back({"send/recv f32 ring, two tags", [&] {
                      return checkSendRecv<float>(g, 129, saltOf(g, 11));
                    }});
  checks.push_back({"send/recv i32 ring, two tags", [&] {
                      return checkSendRecv<int32_t>(g, 129, saltOf(g, 12));
                    }});
  checks.push_back({"broadcast f32 from the last rank", [&] {
                      return checkBroadcast<float>(g, 100, g.group.size() - 1,
                                                   saltOf(g, 13));
                    }});
  checks.push_back({"broadcast i32 from rank 0", [&] {
                      return checkBroadcast<int32_t>(g, 100, 0, saltOf(g, 14));
                    }});
  // BF16 travels as BF16; its sums are fp32 rank-order sums rounded once.
  checks.push_back({absl::StrCat("allReduceSum bf16 x", count), [&] {
                      return checkAllReduce<rt::comm::Bf16>(g, count,
                                                            saltOf(g, 17));
                    }});
  checks.push_back({"allGather bf16 x333", [&] {
                      return checkAllGather<rt::comm::Bf16>(g, 333,
                                                            saltOf(g, 18),
                                                            false);
                    }});
  checks.push_back({"reduceScatterSum bf16 x257 per rank", [&] {
                      return checkReduceScatter<rt::comm::Bf16>(g, 257,
                                                                saltOf(g, 19));
                    }});
  checks.push_back({"allToAll bf16 variable counts", [&] {
                      return checkAllToAll<rt::comm::Bf16>(g, saltOf(g, 20));
                    }});
  checks.push_back({"send/recv bf16 ring, two tags", [&] {
                      return checkSendRecv<rt::comm::Bf16>(g, 129,
                                                           saltOf(g, 21));
                    }});
  checks.push_back({"broadcast bf16 from the last rank", [&] {
                      return checkBroadcast<rt::comm::Bf16>(
                          g, 100, g.group.size() - 1, saltOf(g, 22));
                    }});
  checks.push_back({"barrier", [&] { return checkBarrier(g); }});
  checks.push_back({"three requests in flight",
                    [&] { return checkConcurrent(g, count, saltOf(g, 15)); }});
  checks.push_back(
      {"allReduceSum progresses while another transfer is waited", [&] {
         return checkProgressWhileWaitingElsewhere(g, count, saltOf(g, 16));
       }});
  for (auto &[name, check] : checks)
    if (absl::Status status = run(name, check()); !status.ok())
      return status;
  return absl::OkStatus();
}

} // namespace moe::commtest
