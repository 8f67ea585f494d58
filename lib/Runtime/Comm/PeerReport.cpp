//===- PeerReport.cpp - what the answers to a probe say -------------------===//
#include "Probe.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <map>

namespace moe::rt::comm::detail {

std::string formatRanks(const std::vector<int64_t> &ranks) {
  // Runs of three or more consecutive ranks print as ranges.
  std::vector<std::string> items;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    if (j - i >= 2) {
      items.push_back(absl::StrCat(ranks[i], "-", ranks[j]));
    } else {
      for (size_t k = i; k <= j; ++k)
        items.push_back(absl::StrCat(ranks[k]));
    }
    i = j + 1;
  }
  std::string list;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0)
      list += i + 1 == items.size() ? " and " : ", ";
    list += items[i];
  }
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", list);
}

namespace {

/// One thing the answers say about some ranks, in the singular and the
/// plural ("is waiting" / "are waiting").
struct Finding {
  std::string singular, plural;
  /// The rank waits in the very collective that is stuck.
  bool waitingHere = false;
};

Finding silent(absl::Duration grace) {
  std::string text = absl::StrFormat(
      "did not answer within %.1f s (hung, dead or busy outside the "
      "communication layer)",
      absl::ToDoubleSeconds(grace));
  return {text, text};
}

/// "is waiting in barrier on group {dp} of dp=2", or that it waits for
/// nothing.
Finding whereItWaits(const PeerState &peer) {
  if (!peer.waiting)
    return {"is not waiting for a transfer", "are not waiting for a transfer"};
  std::string where =
      absl::StrCat(" waiting in ", peer.collective, " on group ", peer.groupName);
  return {"is" + where, "are" + where};
}

/// What `peer` does relative to collective `wait`, which it is a member of.
Finding relativeTo(const StuckWait &wait, const PeerState &peer) {
  auto both = [](const std::string &isPart, const std::string &rest) {
    return Finding{"is " + isPart + rest, "are " + isPart + rest};
  };
  // A collective of this group; a transfer (sequence -1) is not one.
  if (peer.waiting && peer.waitGroup == wait.groupId &&
      peer.waitSequence >= 0) {
    std::string number = absl::StrCat("collective #", peer.waitSequence + 1,
                                      " of this group: ", peer.collective);
    if (peer.waitSequence == wait.sequence &&
        peer.collective == wait.collective) {
      Finding here = both("waiting in this collective", "");
      here.waitingHere = true;
      return here;
    }
    if (peer.waitSequence == wait.sequence)
      return both(absl::StrCat("in ", peer.collective, " instead"),
                  absl::StrCat(" (collective #", peer.waitSequence + 1,
                               " of this group: the ranks issued different "
                               "collectives)"));
    return both(peer.waitSequence < wait.sequence ? "behind, in " : "ahead, in ",
                number);
  }
  Finding where = whereItWaits(peer);
  std::string progress;
  if (peer.entered < 0)
    progress = "not created this group";
  else if (peer.entered <= wait.sequence)
    progress = absl::StrCat("not reached this collective (#", wait.sequence + 1,
                            " of this group; it entered ", peer.entered, ")");
  else
    progress = "passed this collective";
  return {absl::StrCat("has ", progress, " and ", where.singular),
          absl::StrCat("have ", progress, " and ", where.plural)};
}

/// Ranks grouped by what is said about them, in the order first said.
class Findings {
public:
  void add(const Finding &finding, int64_t rank) {
    auto [it, inserted] = index_.try_emplace(finding.singular, entries_.size());
    if (inserted)
      entries_.push_back({finding, {}});
    entries_[it->second].ranks.push_back(rank);
  }
  /// "rank 2 did not answer ...", one clause per finding, `prefix` first.
  void appendTo(std::vector<std::string> &clauses,
                const std::string &prefix = "") const {
    for (const Entry &entry : entries_) {
      const std::string &text = entry.ranks.size() == 1
                                    ? entry.finding.singular
                                    : entry.finding.plural;
      clauses.push_back(
          absl::StrCat(prefix, formatRanks(entry.ranks), " ", text));
    }
  }
  bool empty() const { return entries_.empty(); }

private:
  struct Entry {
    Finding finding;
    std::vector<int64_t> ranks;
  };
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
};

} // namespace

std::string
describePeers(const StuckWait &wait,
              const std::vector<std::optional<PeerState>> &answers,
              absl::Duration grace) {
  auto answerOf = [&](int64_t rank) -> const std::optional<PeerState> & {
    static const std::optional<PeerState> none;
    return rank >= 0 && rank < static_cast<int64_t>(answers.size())
               ? answers[rank]
               : none;
  };
  bool collective = wait.sequence >= 0;
  // The silent ranks first: they are the likely cause.
  Findings silentOnes, others, waitingHere, outside;
  std::vector<int64_t> involved =
      collective ? wait.members : std::vector<int64_t>{wait.peer};
  for (int64_t rank : involved) {
    if (rank == wait.self)
      continue;
    const std::optional<PeerState> &answer = answerOf(rank);
    if (!answer) {
      silentOnes.add(silent(grace), rank);
      continue;
    }
    Finding finding =
        collective ? relativeTo(wait, *answer) : whereItWaits(*answer);
    (finding.waitingHere ? waitingHere : others).add(finding, rank);
  }
  for (int64_t rank = 0; rank < static_cast<int64_t>(answers.size()); ++rank)
    if (rank != wait.self &&
        std::find(involved.begin(), involved.end(), rank) == involved.end() &&
        !answerOf(rank))
      outside.add(silent(grace), rank);

  std::vector<std::string> clauses;
  std::string peerPrefix = collective ? "" : "the peer, ";
  silentOnes.appendTo(clauses, peerPrefix);
  others.appendTo(clauses, peerPrefix);
  waitingHere.appendTo(clauses);
  outside.appendTo(clauses, collective ? "outside the group, "
                                       : "of the other ranks, ");
  if (clauses.empty())
    return "every other rank answered";
  return absl::StrJoin(clauses, "; ");
}

} // namespace moe::rt::comm::detail
