//===- ExpertExchangeTest.cpp - expert chunks laid end to end -------------===//
//
// The host side of expert exchanges in chunks, which the CPU and CUDA
// backends share: how the tokens are cut, and how the chunks' plans become
// the tables of one exchange (the rows leave and come back chunk after
// chunk, and each slot finds its row).
//
//===----------------------------------------------------------------------===//
#include "moe/Runtime/Engine/ExpertExchange.h"

#include "gtest/gtest.h"

namespace moe::rt {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

TEST(ExpertExchangeTest, ChunksCutTheTokensEvenly) {
  EXPECT_EQ(expertChunkTokens(10, 1), (Ranges{{0, 10}}));
  EXPECT_EQ(expertChunkTokens(10, 4), (Ranges{{0, 2}, {2, 5}, {5, 7}, {7, 10}}));
  // At most one chunk per token, and at least one chunk.
  EXPECT_EQ(expertChunkTokens(3, 8), (Ranges{{0, 1}, {1, 2}, {2, 3}}));
  EXPECT_EQ(expertChunkTokens(0, 4), (Ranges{{0, 0}}));
  EXPECT_EQ(expertChunkTokens(5, 0), (Ranges{{0, 5}}));
}

TEST(ExpertExchangeTest, ChunksLaidEndToEnd) {
  // 4 tokens, top-2: chunk 0 has tokens 0-1 (slots 0-3), chunk 1 tokens
  // 2-3 (slots 4-7); slot 2 and slot 7 are dropped (go nowhere).
  ExpertExchangePlan first, second;
  first.slots = {1, 0, 3};
  first.recvExperts = {0, 1};
  second.slots = {6, 4, 5};
  second.recvExperts = {1, 1, 0, 0};
  ChunkedExchangeTables tables = layOutChunks({first, second}, 4, 2);
  EXPECT_EQ(tables.slots, (std::vector<int64_t>{1, 0, 3, 6, 4, 5}));
  EXPECT_EQ(tables.positionOfSlot,
            (std::vector<int64_t>{1, 0, -1, 2, 4, 5, 3, -1}));
  EXPECT_EQ(tables.firstSent, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(tables.firstArrived, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(tables.arrivingExperts, (std::vector<int32_t>{0, 1, 1, 1, 0, 0}));
  // One chunk is the plain exchange.
  ChunkedExchangeTables one = layOutChunks({first}, 2, 2);
  EXPECT_EQ(one.slots, first.slots);
  EXPECT_EQ(one.positionOfSlot, (std::vector<int64_t>{1, 0, -1, 2}));
}

} // namespace
} // namespace moe::rt
