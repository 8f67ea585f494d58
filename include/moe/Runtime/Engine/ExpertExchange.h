//===- ExpertExchange.h - who sends which expert rows to whom ---*- C++ -*-===//
//
// Expert parallelism's agreement, shared by the CPU and CUDA backends. This
// rank's routed slots are sorted by global expert, token order within one
// (a stable counting sort, as the kernels group rows). Each rank owns a
// contiguous range of experts, so that order is also grouped by
// destination in group-rank order, which is how an all-to-all packs its
// send buffer. Rows come back in the order they left, so walking them adds
// each token's expert outputs in global expert order, the order of the
// single-rank kernels.
//
// Before any row moves, the ranks exchange headers over MPI: for each
// destination, the rows for each of its local experts and an error flag.
// The counts tell the receiver how many rows arrive and which local expert
// each is for, so no ids travel. The flag lets a rank that found a bad
// expert id stop the whole group in step, instead of leaving the others
// blocked in the row exchange until the deadline.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_ENGINE_EXPERTEXCHANGE_H
#define MOE_RUNTIME_ENGINE_EXPERTEXCHANGE_H

#include "moe/Runtime/Comm/Communicator.h"
#include "moe/Runtime/IO/Trace.h"
#include "moe/Runtime/Program.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace moe::rt {

/// Who sends which rows to whom; the same agreement on every rank.
struct ExpertExchangePlan {
  /// This rank's routed slots t * topK + j, in the order their rows leave
  /// (and come back).
  std::vector<int64_t> slots;
  /// Rows to and from each group rank.
  std::vector<int64_t> sendRows, recvRows;
  /// The local expert of every arriving row, in arrival order.
  std::vector<int32_t> recvExperts;
};

/// OK when every expert id of `indices` ([tokens, topK], host memory) is
/// in [-1, experts); else the error naming the first bad one's token, as
/// "expert id 9 at token 3 (batch 0, seq 3), slot 1 is outside [-1, 8)".
absl::Status checkExpertIds(const Buffer &ids, const int32_t *indices,
                            int64_t tokens, int64_t topK, int64_t experts);

/// Sorts this rank's assignments and exchanges the headers over `group`
/// (a collective call). `routing` is this rank's verdict on its ids
/// (checkExpertIds); when it or any peer's is an error, every rank returns
/// an error after the header exchange.
absl::StatusOr<ExpertExchangePlan>
planExpertExchange(comm::Group &group, const int32_t *indices, int64_t tokens,
                   int64_t topK, int64_t localExperts,
                   const absl::Status &routing, io::Trace *trace = nullptr);

/// The tokens [begin, end) of each chunk when an instruction's `tokens`
/// go in `chunks` chunks (moe-run --expert-chunks): equal chunks, each
/// token's slots in one, at most one chunk per token (and at least one).
std::vector<std::pair<int64_t, int64_t>> expertChunkTokens(int64_t tokens,
                                                           int64_t chunks);

/// The chunks' plans laid end to end, as one exchange's tables: the slots
/// in the order their rows leave (chunk after chunk), each slot's row among
/// them (-1: a slot that goes nowhere) over `tokens` x `topK` slots, and
/// the local expert of each arriving row; per chunk, its first row among
/// those that leave and those that arrive. `plans[c]` holds chunk c's
/// slots counted from the instruction's first token.
struct ChunkedExchangeTables {
  std::vector<int64_t> slots, positionOfSlot, firstSent, firstArrived;
  std::vector<int32_t> arrivingExperts;
};
ChunkedExchangeTables layOutChunks(const std::vector<ExpertExchangePlan> &plans,
                                   int64_t tokens, int64_t topK);

} // namespace moe::rt

#endif // MOE_RUNTIME_ENGINE_EXPERTEXCHANGE_H
