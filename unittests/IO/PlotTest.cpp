//===- PlotTest.cpp - training curves drawn and written as PNG ------------===//
#include "moe/Runtime/IO/Plot.h"

#include "TestFiles.h"

#include "gtest/gtest.h"

#include <png.h>

#include <cmath>

namespace moe::rt::io {
namespace {

constexpr uint32_t kBlue = 0x1f77b4, kRed = 0xd62728;

/// The pixels of `image` in `rgb`, counted.
int64_t count(const PlotImage &image, uint32_t rgb) {
  int64_t n = 0;
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x)
      n += image.at(x, y) == rgb;
  return n;
}

// A falling line from the top-left to the bottom-right corner of the plot
// area: its ends sit at the frame's corners, in the series' colour.
TEST(PlotTest, ASeriesSpansThePanelFromItsFirstToItsLastPoint) {
  PlotPanel panel{"loss", {{"loss", {{1, 4.0}, {2, 3.0}, {3, 2.0}}, kBlue}}};
  PlotImage image = renderPlot({panel}, 400, 200);
  ASSERT_EQ(image.width, 400);
  ASSERT_EQ(image.height, 200);
  // The plot area: 70 px left margin, 20 right, 24 top, 22 bottom.
  EXPECT_EQ(image.at(71, 24 + 2), kBlue);
  EXPECT_EQ(image.at(400 - 20 - 1, 200 - 22 - 2), kBlue);
  EXPECT_NE(image.at(400 - 20 - 1, 24 + 2), kBlue);
  EXPECT_GT(count(image, kBlue), 300); // the line, two pixels thick
}

// A non-finite point breaks the line; a series of only those draws nothing,
// and the panel is still framed.
TEST(PlotTest, NonFinitePointsAreLeftOut) {
  PlotPanel empty{"loss", {{"loss", {{1, NAN}, {2, INFINITY}}, kBlue}}};
  PlotImage image = renderPlot({empty}, 400, 200);
  EXPECT_EQ(
      count(image, kBlue),
      count(renderPlot({{"loss", {{"loss", {}, kBlue}}}}, 400, 200), kBlue));
  PlotPanel two{"loss",
                {{"loss", {{1, 1.0}, {2, 2.0}}, kBlue},
                 {"eval_loss", {{1, 1.5}, {2, NAN}}, kRed}}};
  EXPECT_GT(count(renderPlot({two}, 400, 200), kRed), 0);
}

TEST(PlotTest, WritesAPngThatLibpngReadsBack) {
  testing::ScratchDir dir;
  std::string path = dir.file("run.png");
  PlotPanel losses{"loss", {{"loss", {{1, 3.0}, {2, 2.0}}, kBlue}}};
  PlotPanel speed{"throughput", {{"tokens/s", {{1, 10.0}, {2, 12.0}}}}};
  ASSERT_TRUE(writePlotPng(path, {losses, speed}, 320, 160).ok());
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_file(&png, path.c_str()))
      << png.message;
  EXPECT_EQ(png.width, 320u);
  EXPECT_EQ(png.height, 320u);
  png.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(png));
  ASSERT_TRUE(png_image_finish_read(&png, nullptr, pixels.data(), 0, nullptr));
  EXPECT_EQ(pixels, renderPlot({losses, speed}, 320, 160).rgb);
}

TEST(PlotTest, AnUnwritablePathIsAnErrorNamingIt) {
  testing::ScratchDir dir;
  std::string path = dir.file("missing/run.png");
  PlotPanel losses{"loss", {{"loss", {{1, 3.0}}, kBlue}}};
  absl::Status status = writePlotPng(path, {losses});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
}

} // namespace
} // namespace moe::rt::io
