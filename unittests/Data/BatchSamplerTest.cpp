//===- BatchSamplerTest.cpp - deterministic training windows --------------===//
#include "TestDatasets.h"

#include "moe/Runtime/Data/TokenDataset.h"
#include "moe/Runtime/Data/TokenWriter.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <map>
#include <set>

using namespace moe::rt::data;
using moe::testing::ScratchDir;
using ::testing::HasSubstr;

namespace {

/// A flat uint32 dataset whose token at position i is i, so a window's
/// contents reveal where it came from.
class BatchSamplerTest : public ::testing::Test {
protected:
  TokenDataset identityDataset(int64_t n) {
    std::vector<int64_t> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      tokens[static_cast<size_t>(i)] = i;
    std::string path = dir_.file("identity.bin");
    EXPECT_TRUE(writeFlatTokens(path, tokens, TokenDtype::UInt32).ok());
    DatasetOptions options;
    options.flatDtype = TokenDtype::UInt32;
    absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path, options);
    EXPECT_TRUE(dataset.ok()) << dataset.status();
    return std::move(*dataset);
  }

  ScratchDir dir_;
};

TEST_F(BatchSamplerTest, WindowsAreContiguousAndTargetsShiftByOne) {
  TokenDataset dataset = identityDataset(1000);
  const int64_t B = 4, S = 16;
  absl::StatusOr<BatchSampler> sampler =
      BatchSampler::create(dataset, /*seed=*/7, B, S);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  std::vector<int32_t> tokens(B * S), targets(B * S);
  for (int64_t step = 0; step < 50; ++step) {
    ASSERT_TRUE(sampler->fill(step, tokens.data(), targets.data()).ok());
    for (int64_t b = 0; b < B; ++b) {
      int64_t start = sampler->windowStart(step, b);
      ASSERT_GE(start, 0);
      ASSERT_LE(start, 1000 - S - 1);
      for (int64_t s = 0; s < S; ++s) {
        EXPECT_EQ(tokens[b * S + s], start + s);
        EXPECT_EQ(targets[b * S + s], start + s + 1);
        if (s + 1 < S) {
          EXPECT_EQ(targets[b * S + s], tokens[b * S + s + 1]);
        }
      }
    }
  }
}

TEST_F(BatchSamplerTest, IsDeterministicAndResumable) {
  TokenDataset dataset = identityDataset(5000);
  const int64_t B = 3, S = 8;
  absl::StatusOr<BatchSampler> first = BatchSampler::create(dataset, 42, B, S);
  ASSERT_TRUE(first.ok());
  std::vector<std::vector<int32_t>> batches;
  std::vector<int32_t> tokens(B * S), targets(B * S);
  for (int64_t step = 0; step < 20; ++step) {
    ASSERT_TRUE(first->fill(step, tokens.data(), targets.data()).ok());
    batches.push_back(tokens);
  }
  // A fresh sampler resumed at step 13 sees what the first saw there.
  absl::StatusOr<BatchSampler> resumed =
      BatchSampler::create(dataset, 42, B, S);
  ASSERT_TRUE(resumed.ok());
  for (int64_t step = 13; step < 20; ++step) {
    ASSERT_TRUE(resumed->fill(step, tokens.data(), targets.data()).ok());
    EXPECT_EQ(tokens, batches[step]) << "step " << step;
  }
  // Steps differ from each other, and another seed gives other batches.
  EXPECT_NE(batches[0], batches[1]);
  absl::StatusOr<BatchSampler> other = BatchSampler::create(dataset, 43, B, S);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other->fill(0, tokens.data(), targets.data()).ok());
  EXPECT_NE(tokens, batches[0]);
  // The hash itself is pinned, so batches stay the same across builds.
  EXPECT_EQ(sampleWindowStart(42, 0, 0, 4992), first->windowStart(0, 0));
  EXPECT_EQ(batchHash(0, 0, 0, 0), batchHash(0, 0, 0, 0));
  EXPECT_NE(batchHash(0, 0, 0, 0), batchHash(0, 0, 1, 0));
  EXPECT_NE(batchHash(0, 1, 0, 0), batchHash(0, 0, 1, 0));
}

TEST_F(BatchSamplerTest, FillRowsMatchesTheFullBatch) {
  TokenDataset dataset = identityDataset(300);
  const int64_t B = 6, S = 5;
  absl::StatusOr<BatchSampler> sampler = BatchSampler::create(dataset, 1, B, S);
  ASSERT_TRUE(sampler.ok());
  std::vector<int32_t> tokens(B * S), targets(B * S);
  ASSERT_TRUE(sampler->fill(9, tokens.data(), targets.data()).ok());
  std::vector<int32_t> part(2 * S), partTargets(2 * S);
  ASSERT_TRUE(sampler->fillRows(9, 3, 2, part.data(), partTargets.data()).ok());
  EXPECT_EQ(part, std::vector<int32_t>(tokens.begin() + 3 * S,
                                       tokens.begin() + 5 * S));
  EXPECT_EQ(partTargets, std::vector<int32_t>(targets.begin() + 3 * S,
                                              targets.begin() + 5 * S));
  EXPECT_FALSE(
      sampler->fillRows(9, 5, 2, part.data(), partTargets.data()).ok());
  EXPECT_FALSE(sampler->fill(-1, tokens.data(), targets.data()).ok());
}

TEST_F(BatchSamplerTest, StartsAreUniformOverEveryWindow) {
  // N = S + 3: starts 0..2, every one reachable, the last ending at N - 1.
  TokenDataset dataset = identityDataset(11);
  absl::StatusOr<BatchSampler> sampler = BatchSampler::create(dataset, 5, 1, 8);
  ASSERT_TRUE(sampler.ok());
  EXPECT_EQ(sampler->numStarts(), 3);
  std::map<int64_t, int> counts;
  for (int64_t step = 0; step < 3000; ++step)
    ++counts[sampler->windowStart(step, 0)];
  ASSERT_EQ(counts.size(), 3u);
  for (const auto &[start, count] : counts) {
    EXPECT_GE(start, 0);
    EXPECT_LE(start, 2);
    EXPECT_NEAR(count, 1000, 120) << "start " << start;
  }
  // A wider range, bucketed: a rough chi-square bound.
  std::vector<int> buckets(10, 0);
  for (int64_t row = 0; row < 100000; ++row)
    ++buckets[static_cast<size_t>(sampleWindowStart(3, 0, row, 1000) / 100)];
  double chi2 = 0;
  for (int count : buckets)
    chi2 += (count - 10000.0) * (count - 10000.0) / 10000.0;
  EXPECT_LT(chi2, 40.0); // 9 degrees of freedom; p < 1e-5
}

TEST_F(BatchSamplerTest, TheSmallestDatasetHasOneWindow) {
  TokenDataset dataset = identityDataset(9);
  absl::StatusOr<BatchSampler> sampler = BatchSampler::create(dataset, 0, 2, 8);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  std::vector<int32_t> tokens(16), targets(16);
  ASSERT_TRUE(sampler->fill(3, tokens.data(), targets.data()).ok());
  EXPECT_EQ(tokens[0], 0);
  EXPECT_EQ(targets[7], 8);
  EXPECT_EQ(tokens[8], 0);
}

TEST_F(BatchSamplerTest, RejectsDatasetsTooSmallForOneSample) {
  TokenDataset dataset = identityDataset(8);
  absl::StatusOr<BatchSampler> sampler = BatchSampler::create(dataset, 0, 1, 8);
  ASSERT_FALSE(sampler.ok());
  std::string message(sampler.status().message());
  EXPECT_THAT(message, HasSubstr(dataset.path()));
  EXPECT_THAT(message, HasSubstr("has 8 tokens, fewer than the 9"));
  EXPECT_FALSE(BatchSampler::create(dataset, 0, 0, 4).ok());
  EXPECT_FALSE(BatchSampler::create(dataset, 0, 1, 0).ok());
}

TEST_F(BatchSamplerTest, ChecksTheVocabAtDataPositions) {
  // S = 8, N = 9: every window is the whole dataset.
  std::string path = dir_.file("bad.bin");
  std::vector<int64_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  tokens[5] = 500;
  ASSERT_TRUE(writeFlatTokens(path, tokens).ok());
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(path);
  ASSERT_TRUE(dataset.ok());
  std::vector<int32_t> ids(8), targets(8);
  absl::StatusOr<BatchSampler> sampler =
      BatchSampler::create(*dataset, 0, 1, 8, /*vocab=*/256);
  ASSERT_TRUE(sampler.ok());
  absl::Status status = sampler->fill(0, ids.data(), targets.data());
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("token id 500 at position 5"));
  // Without a vocab, only int32 range is checked.
  absl::StatusOr<BatchSampler> unchecked =
      BatchSampler::create(*dataset, 0, 1, 8);
  ASSERT_TRUE(unchecked.ok());
  EXPECT_TRUE(unchecked->fill(0, ids.data(), targets.data()).ok());

  // A bad id seen only as the last target is reported too.
  tokens[5] = 6;
  tokens[8] = 256;
  ASSERT_TRUE(writeFlatTokens(path, tokens).ok());
  absl::StatusOr<TokenDataset> reopened = TokenDataset::open(path);
  ASSERT_TRUE(reopened.ok());
  absl::StatusOr<BatchSampler> last =
      BatchSampler::create(*reopened, 0, 1, 8, 256);
  ASSERT_TRUE(last.ok());
  status = last->fill(0, ids.data(), targets.data());
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("token id 256 at position 8"));
}

TEST_F(BatchSamplerTest, WindowsSpanMegatronSequences) {
  std::string prefix = dir_.file("docs");
  std::vector<std::vector<int64_t>> documents;
  std::vector<int64_t> stream;
  for (int d = 0; d < 30; ++d) {
    std::vector<int64_t> document;
    for (int i = 0; i <= d % 7; ++i) {
      document.push_back(static_cast<int64_t>(stream.size()));
      stream.push_back(static_cast<int64_t>(stream.size()));
    }
    documents.push_back(document);
  }
  ASSERT_TRUE(writeMegatronDataset(prefix, documents).ok());
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(dataset->numTokens(), static_cast<int64_t>(stream.size()));
  absl::StatusOr<BatchSampler> sampler =
      BatchSampler::create(*dataset, 11, 2, 10, 256);
  ASSERT_TRUE(sampler.ok());
  std::vector<int32_t> tokens(20), targets(20);
  for (int64_t step = 0; step < 20; ++step) {
    ASSERT_TRUE(sampler->fill(step, tokens.data(), targets.data()).ok());
    for (int64_t b = 0; b < 2; ++b) {
      int64_t start = sampler->windowStart(step, b);
      for (int64_t s = 0; s < 10; ++s) {
        EXPECT_EQ(tokens[b * 10 + s], stream[start + s]);
        EXPECT_EQ(targets[b * 10 + s], stream[start + s + 1]);
      }
    }
  }
}

// Document masking from an end-of-document id: positions restart after
// every eos (and at the window's start), and the target after an eos, the
// next document's first token, is ignored.
TEST_F(BatchSamplerTest, MarksDocumentsAfterEachEos) {
  TokenDataset dataset = identityDataset(1000);
  const int64_t B = 3, S = 20;
  absl::StatusOr<BatchSampler> sampler = BatchSampler::create(dataset, 5, B, S);
  ASSERT_TRUE(sampler.ok());
  std::vector<int32_t> tokens(B * S), targets(B * S), positions(B * S);
  for (int64_t step = 0; step < 20; ++step) {
    ASSERT_TRUE(sampler->fill(step, tokens.data(), targets.data()).ok());
    // The stream's id i, renamed to the eos 6 when i % 7 == 6, ends a
    // document then.
    const int32_t eos = 6;
    std::vector<int32_t> marked = targets, ids = tokens;
    for (int32_t &id : ids)
      if (id % 7 == 6)
        id = eos;
    sampler->markDocuments(step, 0, B, eos, ids.data(), marked.data(),
                           positions.data());
    for (int64_t b = 0; b < B; ++b) {
      int64_t start = sampler->windowStart(step, b);
      for (int64_t s = 0; s < S; ++s) {
        int64_t at = start + s;
        // Documents [7k, 7k + 7) of the stream, cut at the window start.
        EXPECT_EQ(positions[b * S + s], std::min<int64_t>(at % 7, s))
            << "at " << at;
        bool nextBegins = (at + 1) % 7 == 0;
        EXPECT_EQ(marked[b * S + s], nextBegins ? -100 : targets[b * S + s])
            << "at " << at;
      }
    }
  }
}

// A Megatron dataset's documents are its index's: positions restart at
// each document offset, with no end-of-document id.
TEST_F(BatchSamplerTest, MarksMegatronDocuments) {
  std::string prefix = dir_.file("documents");
  std::vector<std::vector<int64_t>> documents;
  std::vector<int64_t> firstOf; // each stream position's document start
  int64_t next = 0;
  for (int d = 0; d < 40; ++d) {
    std::vector<int64_t> document;
    for (int i = 0; i <= d % 5; ++i) {
      document.push_back(next % 200);
      firstOf.push_back(next - i);
      ++next;
    }
    documents.push_back(document);
  }
  ASSERT_TRUE(writeMegatronDataset(prefix, documents).ok());
  absl::StatusOr<TokenDataset> dataset = TokenDataset::open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const int64_t B = 2, S = 9;
  absl::StatusOr<BatchSampler> sampler =
      BatchSampler::create(*dataset, 3, B, S, 256);
  ASSERT_TRUE(sampler.ok());
  std::vector<int32_t> tokens(B * S), targets(B * S), positions(B * S);
  for (int64_t step = 0; step < 30; ++step) {
    ASSERT_TRUE(sampler->fill(step, tokens.data(), targets.data()).ok());
    std::vector<int32_t> marked = targets;
    sampler->markDocuments(step, 0, B, std::nullopt, tokens.data(),
                           marked.data(), positions.data());
    for (int64_t b = 0; b < B; ++b) {
      int64_t start = sampler->windowStart(step, b);
      for (int64_t s = 0; s < S; ++s) {
        int64_t at = start + s;
        EXPECT_EQ(positions[b * S + s], std::min(at - firstOf[at], s));
        bool nextBegins = firstOf[at + 1] == at + 1;
        EXPECT_EQ(marked[b * S + s], nextBegins ? -100 : targets[b * S + s]);
      }
    }
  }
}

} // namespace
