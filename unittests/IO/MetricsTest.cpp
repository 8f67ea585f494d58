//===- MetricsTest.cpp - JSONL metrics and progress lines -----------------===//
#include "TestFiles.h"

#include "moe/Runtime/IO/Metrics.h"

#include "nlohmann/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

using namespace moe::rt::io;
using moe::testing::readBytes;
using moe::testing::ScratchDir;
using ::testing::HasSubstr;

namespace {

MetricsRecord sampleRecord() {
  MetricsRecord record;
  record.step = 12;
  record.loss = 3.45123;
  record.gradNorm = 1.2341;
  record.lr = 0.003;
  record.tokensPerS = 41234.0;
  record.flopsPerS = 1.234e9;
  record.elapsedS = 12.34;
  return record;
}

TEST(Metrics, JsonHasTheStandardFieldsInOrder) {
  MetricsRecord record = sampleRecord();
  record.extra = {{"aux_loss", 0.5}, {"ce_loss", 3.0}};
  absl::StatusOr<std::string> line = formatMetricsJson(record);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, R"({"step":12,"loss":3.45123,"grad_norm":1.2341,"lr":0.003,)"
                   R"("tokens_per_s":41234.0,"flops_per_s":1234000000.0,)"
                   R"("elapsed_s":12.34,"aux_loss":0.5,"ce_loss":3.0})");
}

TEST(Metrics, JsonLeavesOutAbsentFieldsAndNullsNonFinite) {
  MetricsRecord record;
  record.step = 3;
  record.loss = std::numeric_limits<double>::quiet_NaN();
  record.extra = {{"x", std::numeric_limits<double>::infinity()}};
  absl::StatusOr<std::string> line = formatMetricsJson(record);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, R"({"step":3,"loss":null,"x":null})");
}

TEST(Metrics, JsonRejectsBadExtraFields) {
  MetricsRecord record;
  record.extra = {{"loss", 1.0}};
  EXPECT_THAT(std::string(formatMetricsJson(record).status().message()),
              HasSubstr("'loss' is given twice"));
  record.extra = {{"a", 1.0}, {"a", 2.0}};
  EXPECT_FALSE(formatMetricsJson(record).ok());
  record.extra = {{"", 1.0}};
  EXPECT_FALSE(formatMetricsJson(record).ok());
}

TEST(Metrics, WriterFlushesEachLine) {
  ScratchDir dir;
  std::string path = dir.file("metrics.jsonl");
  absl::StatusOr<MetricsWriter> writer = MetricsWriter::open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  MetricsRecord record = sampleRecord();
  ASSERT_TRUE(writer->write(record).ok());
  // Visible before the writer is closed.
  std::string first = readBytes(path);
  EXPECT_EQ(std::count(first.begin(), first.end(), '\n'), 1);
  record.step = 13;
  ASSERT_TRUE(writer->write(record).ok());
  std::string contents = readBytes(path);
  std::istringstream lines(contents);
  std::string line;
  int64_t step = 12;
  int count = 0;
  while (std::getline(lines, line)) {
    nlohmann::json json = nlohmann::json::parse(line);
    EXPECT_EQ(json["step"], step++);
    EXPECT_DOUBLE_EQ(json["loss"].get<double>(), 3.45123);
    ++count;
  }
  EXPECT_EQ(count, 2);
  ASSERT_TRUE(writer->close().ok());
  EXPECT_FALSE(writer->write(record).ok());
}

TEST(Metrics, WriterAppendsOrTruncates) {
  ScratchDir dir;
  std::string path = dir.file("metrics.jsonl");
  MetricsRecord record;
  {
    absl::StatusOr<MetricsWriter> writer = MetricsWriter::open(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->write(record).ok());
  }
  {
    absl::StatusOr<MetricsWriter> writer =
        MetricsWriter::open(path, /*append=*/true);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->write(record).ok());
  }
  EXPECT_EQ(readBytes(path), "{\"step\":0}\n{\"step\":0}\n");
  {
    absl::StatusOr<MetricsWriter> writer = MetricsWriter::open(path);
    ASSERT_TRUE(writer.ok());
  }
  EXPECT_EQ(readBytes(path), "");
}

TEST(Metrics, WriterReportsOpenAndFieldErrors) {
  ScratchDir dir;
  std::string path = dir.file("no/such/dir/metrics.jsonl");
  absl::StatusOr<MetricsWriter> missing = MetricsWriter::open(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(path));
  absl::StatusOr<MetricsWriter> writer =
      MetricsWriter::open(dir.file("m.jsonl"));
  ASSERT_TRUE(writer.ok());
  MetricsRecord record;
  record.extra = {{"step", 1.0}};
  absl::Status status = writer->write(record);
  EXPECT_THAT(std::string(status.message()), HasSubstr("m.jsonl"));
  EXPECT_EQ(readBytes(dir.file("m.jsonl")), "");
}

TEST(Metrics, ProgressLine) {
  MetricsRecord record = sampleRecord();
  EXPECT_EQ(formatProgressLine(record, 300),
            "step 12/300 | loss 3.4512 | grad_norm 1.234 | lr 3.00e-03 | "
            "41.2k tok/s | 1.23 GFLOP/s | 12.3 s");
  MetricsRecord sparse;
  sparse.step = 7;
  sparse.loss = 2.0;
  sparse.extra = {{"aux_loss", 0.0123456}};
  EXPECT_EQ(formatProgressLine(sparse),
            "step 7 | loss 2.0000 | aux_loss 0.01235");
}

// Per-layer details go to the file after the extras, never to the line.
TEST(Metrics, DetailsInTheFileOnly) {
  MetricsRecord record;
  record.step = 4;
  record.loss = 2.0;
  record.extra = {{"load_cv_max", 0.5}};
  record.detail = {{"load_cv.1", 0.25}, {"load_cv.3", 0.5}};
  absl::StatusOr<std::string> line = formatMetricsJson(record);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, R"({"step":4,"loss":2.0,"load_cv_max":0.5,)"
                   R"("load_cv.1":0.25,"load_cv.3":0.5})");
  EXPECT_EQ(formatProgressLine(record),
            "step 4 | loss 2.0000 | load_cv_max 0.5");
  record.detail.push_back({"load_cv_max", 1.0});
  EXPECT_THAT(std::string(formatMetricsJson(record).status().message()),
              HasSubstr("'load_cv_max' is given twice"));
}

TEST(Metrics, SiValues) {
  EXPECT_EQ(formatSiValue(0), "0.00");
  EXPECT_EQ(formatSiValue(0.5), "0.50");
  EXPECT_EQ(formatSiValue(12.34), "12.3");
  EXPECT_EQ(formatSiValue(950), "950");
  EXPECT_EQ(formatSiValue(999.7), "1.00k");
  EXPECT_EQ(formatSiValue(41234), "41.2k");
  EXPECT_EQ(formatSiValue(3.1e6), "3.10M");
  EXPECT_EQ(formatSiValue(2.5e12), "2.50T");
  EXPECT_EQ(formatSiValue(-1500), "-1.50k");
  EXPECT_EQ(formatSiValue(std::nan("")), "nan");
}

} // namespace
