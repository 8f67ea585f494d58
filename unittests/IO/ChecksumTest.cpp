//===- ChecksumTest.cpp - XXH64 and FNV-1a against reference digests ------===//
#include "moe/Runtime/IO/Checksum.h"

#include "gtest/gtest.h"

#include <cstdint>
#include <string>
#include <vector>

using namespace moe::rt::io;

namespace {

/// Bytes 0, 1, ..., 255, 0, 1, ... (n of them).
std::vector<uint8_t> counting(size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i)
    bytes[i] = static_cast<uint8_t>(i);
  return bytes;
}

TEST(Checksum, Xxh64MatchesTheReferenceDigests) {
  // Digests of libxxhash 0.8.1's XXH64(data, n, 0).
  EXPECT_EQ(contentChecksum(""), 0xef46db3751d8e999ull);
  EXPECT_EQ(contentChecksum("a"), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(contentChecksum("abc"), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(contentChecksum("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM"
                            "NOPQRSTUVWXYZ!?"),
            0xc02a83e75f3ed6edull);
  // Every path of the algorithm: the 1-, 4- and 8-byte tails, exactly one
  // stripe, a stripe and a byte, many stripes.
  const std::pair<size_t, uint64_t> prefixes[] = {
      {3, 0xe5c7bb4533bc65ddull},   {4, 0xffced8604453cc1eull},
      {7, 0x14cc643f630c72d2ull},   {8, 0x884a173614b81b8dull},
      {31, 0xc346d2b59b4d8ee1ull},  {32, 0xcbf59c5116ff32b4ull},
      {33, 0x0c535d1acafb8eadull},  {63, 0xe26aa9e2a95f8e4full},
      {100, 0x6ac1e58032166597ull}, {1000, 0x6ef436b00eba4078ull},
      {1280, 0xafc184ad7938a354ull}};
  std::vector<uint8_t> bytes = counting(1280);
  for (const auto &[n, digest] : prefixes)
    EXPECT_EQ(contentChecksum(absl::MakeConstSpan(bytes.data(), n)), digest)
        << n << " bytes";
}

TEST(Checksum, AnyChangedByteChangesTheChecksum) {
  std::vector<uint8_t> bytes = counting(4096);
  uint64_t original = contentChecksum(bytes);
  for (size_t i = 0; i < bytes.size(); i += 97) {
    bytes[i] ^= 1;
    EXPECT_NE(contentChecksum(bytes), original) << "byte " << i;
    bytes[i] ^= 1;
  }
  EXPECT_EQ(contentChecksum(bytes), original);
}

TEST(Checksum, FormatSaysWhichHash) {
  EXPECT_EQ(formatChecksum(0xef46db3751d8e999ull), "xxh64:ef46db3751d8e999");
  EXPECT_EQ(formatChecksum(0x1f), "xxh64:000000000000001f");
}

TEST(Checksum, Fnv1aMatchesTheReferenceDigests) {
  // The FNV-1a 64 test vectors (Fowler, Noll, Vo); cpu::nameHash is this,
  // so these also pin the parameters' random streams.
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

} // namespace
