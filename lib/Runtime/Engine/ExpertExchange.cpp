//===- ExpertExchange.cpp - who sends which expert rows to whom -----------===//
#include "moe/Runtime/Engine/ExpertExchange.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace moe::rt {

absl::Status checkExpertIds(const Buffer &ids, const int32_t *indices,
                            int64_t tokens, int64_t topK, int64_t experts) {
  int64_t slot = 0;
  while (slot < tokens * topK && indices[slot] >= -1 && indices[slot] < experts)
    ++slot;
  if (slot == tokens * topK)
    return absl::OkStatus();
  // Named like Embedding's bad ids: "token 3 (batch 0, seq 3), slot 1" for
  // ids laid out as [B, S, k].
  int64_t token = slot / topK;
  std::string where = absl::StrCat("token ", token);
  if (ids.shape.size() == 3 && ids.shape[1] > 0)
    absl::StrAppend(&where, " (batch ", token / ids.shape[1], ", seq ",
                    token % ids.shape[1], ")");
  return absl::InvalidArgumentError(
      absl::StrCat("expert id ", indices[slot], " at ", where, ", slot ",
                   slot % topK, " is outside [-1, ", experts, ")"));
}

absl::StatusOr<ExpertExchangePlan>
planExpertExchange(comm::Group &group, const int32_t *indices, int64_t tokens,
                   int64_t topK, int64_t localExperts,
                   const absl::Status &routing, io::Trace *trace) {
  io::TraceScope span(trace, io::TraceTrack::Communication, "expert counts");
  int64_t ranks = group.size(), local = localExperts;
  int64_t experts = local * ranks, width = local + 1;
  ExpertExchangePlan plan;
  plan.sendRows.assign(ranks, 0);
  // Per destination: rows for each of its local experts, then the flag.
  std::vector<int32_t> header(ranks * width, 0);
  if (routing.ok()) {
    int64_t slots = tokens * topK;
    std::vector<int64_t> next(experts + 1, 0);
    for (int64_t s = 0; s < slots; ++s)
      if (indices[s] >= 0)
        ++next[indices[s] + 1];
    for (int64_t e = 0; e < experts; ++e) {
      // Counts are at most T * k, which the verifier keeps within int32.
      header[e / local * width + e % local] = static_cast<int32_t>(next[e + 1]);
      plan.sendRows[e / local] += next[e + 1];
      next[e + 1] += next[e];
    }
    plan.slots.resize(next[experts]);
    for (int64_t s = 0; s < slots; ++s)
      if (indices[s] >= 0)
        plan.slots[next[indices[s]]++] = s;
  } else {
    for (int64_t d = 0; d < ranks; ++d)
      header[d * width + local] = 1;
  }

  std::vector<int32_t> received(header.size());
  std::vector<int64_t> counts(ranks, width), offsets(ranks);
  for (int64_t d = 0; d < ranks; ++d)
    offsets[d] = d * width;
  if (absl::Status status = group.allToAll(
          header, counts, offsets, absl::MakeSpan(received), counts, offsets);
      !status.ok())
    return status;
  if (!routing.ok())
    return routing;
  for (int64_t i = 0; i < ranks; ++i)
    if (received[i * width + local] != 0)
      return absl::InvalidArgumentError(
          absl::StrCat("group rank ", i, " of ", group.name(),
                       " has an expert id outside [-1, ", experts, ")"));

  plan.recvRows.assign(ranks, 0);
  for (int64_t i = 0; i < ranks; ++i)
    for (int32_t e = 0; e < local; ++e) {
      int32_t rows = received[i * width + e];
      plan.recvRows[i] += rows;
      plan.recvExperts.insert(plan.recvExperts.end(), rows, e);
    }
  return plan;
}

std::vector<std::pair<int64_t, int64_t>> expertChunkTokens(int64_t tokens,
                                                           int64_t chunks) {
  int64_t count = std::max<int64_t>(1, std::min<int64_t>(chunks, tokens));
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t c = 0; c < count; ++c)
    ranges.emplace_back(tokens * c / count, tokens * (c + 1) / count);
  return ranges;
}

ChunkedExchangeTables layOutChunks(const std::vector<ExpertExchangePlan> &plans,
                                   int64_t tokens, int64_t topK) {
  ChunkedExchangeTables tables;
  tables.positionOfSlot.assign(tokens * topK, -1);
  int64_t arrived = 0;
  for (const ExpertExchangePlan &plan : plans) {
    tables.firstSent.push_back(static_cast<int64_t>(tables.slots.size()));
    tables.firstArrived.push_back(arrived);
    for (int64_t slot : plan.slots) {
      tables.positionOfSlot[slot] = static_cast<int64_t>(tables.slots.size());
      tables.slots.push_back(slot);
    }
    tables.arrivingExperts.insert(tables.arrivingExperts.end(),
                                  plan.recvExperts.begin(),
                                  plan.recvExperts.end());
    arrived += static_cast<int64_t>(plan.recvExperts.size());
  }
  return tables;
}

} // namespace moe::rt
