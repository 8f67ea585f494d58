//===- Plot.cpp - line panels rendered and written as PNG -----------------===//
#include "moe/Runtime/IO/Plot.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace moe::rt::io {

namespace {
constexpr int kGlyphWidth = 5, kGlyphHeight = 7, kAdvance = 6;
constexpr uint32_t kWhite = 0xffffff, kFrame = 0x808080, kText = 0x202020;
constexpr int kLeft = 70, kRight = 20, kTop = 24, kBottom = 22;

/// Rows of a 5x7 glyph, the top row first, bit 4 the leftmost pixel.
struct Glyph {
  char c;
  uint8_t rows[kGlyphHeight];
};
// clang-format off
constexpr Glyph kFont[] = {
    {'0', {0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e}},
    {'1', {0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e}},
    {'2', {0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f}},
    {'3', {0x1e, 0x01, 0x01, 0x0e, 0x01, 0x01, 0x1e}},
    {'4', {0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02}},
    {'5', {0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e}},
    {'6', {0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e}},
    {'7', {0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e}},
    {'9', {0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c}},
    {'-', {0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1f, 0x04, 0x04, 0x00}},
    {'/', {0x01, 0x02, 0x02, 0x04, 0x08, 0x08, 0x10}},
    {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1f}},
    {':', {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x0c, 0x00}},
    {' ', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {'a', {0x00, 0x00, 0x0e, 0x01, 0x0f, 0x11, 0x0f}},
    {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1e}},
    {'c', {0x00, 0x00, 0x0e, 0x10, 0x10, 0x11, 0x0e}},
    {'d', {0x01, 0x01, 0x0d, 0x13, 0x11, 0x11, 0x0f}},
    {'e', {0x00, 0x00, 0x0e, 0x11, 0x1f, 0x10, 0x0e}},
    {'f', {0x06, 0x08, 0x1c, 0x08, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x0f, 0x11, 0x11, 0x0f, 0x01, 0x0e}},
    {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0c, 0x04, 0x04, 0x04, 0x0e}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}},
    {'l', {0x0c, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e}},
    {'m', {0x00, 0x00, 0x1a, 0x15, 0x15, 0x11, 0x11}},
    {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0e, 0x11, 0x11, 0x11, 0x0e}},
    {'p', {0x00, 0x00, 0x1e, 0x11, 0x1e, 0x10, 0x10}},
    {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0f, 0x10, 0x0e, 0x01, 0x1e}},
    {'t', {0x08, 0x08, 0x1c, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0d}},
    {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0a, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0a}},
    {'x', {0x00, 0x00, 0x11, 0x0a, 0x04, 0x0a, 0x11}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x0f, 0x01, 0x0e}},
};
// clang-format on
constexpr uint8_t kBox[kGlyphHeight] = {0x1f, 0x11, 0x11, 0x11,
                                        0x11, 0x11, 0x1f};

class Canvas {
public:
  explicit Canvas(PlotImage &image) : image(image) {}

  void set(int x, int y, uint32_t rgb) {
    if (x < 0 || y < 0 || x >= image.width || y >= image.height)
      return;
    uint8_t *pixel = &image.rgb[3 * (static_cast<size_t>(y) * image.width + x)];
    pixel[0] = (rgb >> 16) & 0xff;
    pixel[1] = (rgb >> 8) & 0xff;
    pixel[2] = rgb & 0xff;
  }
  /// A line two pixels thick (Bresenham's, doubled downwards).
  void line(int x0, int y0, int x1, int y1, uint32_t rgb) {
    int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, error = dx + dy;
    while (true) {
      set(x0, y0, rgb);
      set(x0, y0 + 1, rgb);
      if (x0 == x1 && y0 == y1)
        return;
      int twice = 2 * error;
      if (twice >= dy) {
        error += dy;
        x0 += sx;
      }
      if (twice <= dx) {
        error += dx;
        y0 += sy;
      }
    }
  }
  void rectangle(int x0, int y0, int x1, int y1, uint32_t rgb) {
    for (int x = x0; x <= x1; ++x) {
      set(x, y0, rgb);
      set(x, y1, rgb);
    }
    for (int y = y0; y <= y1; ++y) {
      set(x0, y, rgb);
      set(x1, y, rgb);
    }
  }
  /// `text` with its top-left corner at (x, y); returns the x after it.
  int text(int x, int y, const std::string &text, uint32_t rgb) {
    for (char c : text) {
      const uint8_t *rows = kBox;
      for (const Glyph &glyph : kFont)
        if (glyph.c == c)
          rows = glyph.rows;
      for (int row = 0; row < kGlyphHeight; ++row)
        for (int col = 0; col < kGlyphWidth; ++col)
          if (rows[row] & (0x10 >> col))
            set(x + col, y + row, rgb);
      x += kAdvance;
    }
    return x;
  }

private:
  PlotImage &image;
};

std::string label(double value) { return absl::StrFormat("%.4g", value); }

void drawPanel(Canvas &canvas, const PlotPanel &panel, int top, int width,
               int height) {
  int x0 = kLeft, x1 = width - kRight, y0 = top + kTop,
      y1 = top + height - kBottom;
  canvas.rectangle(x0, y0, x1, y1, kFrame);
  int x = canvas.text(x0, top + 8, panel.title, kText) + 2 * kAdvance;
  for (const PlotSeries &series : panel.series)
    x = canvas.text(x, top + 8, series.name, series.rgb) + 2 * kAdvance;
  double loX = std::numeric_limits<double>::infinity(), hiX = -loX, loY = loX,
         hiY = -loX;
  for (const PlotSeries &series : panel.series)
    for (auto [px, py] : series.points)
      if (std::isfinite(px) && std::isfinite(py)) {
        loX = std::min(loX, px);
        hiX = std::max(hiX, px);
        loY = std::min(loY, py);
        hiY = std::max(hiY, py);
      }
  if (!(loX <= hiX))
    return; // nothing finite to draw
  // A flat series still gets a band around it.
  if (hiX == loX)
    hiX = loX + 1;
  if (hiY == loY) {
    double pad = std::max(std::abs(loY) * 0.05, 1e-6);
    loY -= pad;
    hiY += pad;
  }
  canvas.text(4, y0, label(hiY), kText);
  canvas.text(4, y1 - kGlyphHeight, label(loY), kText);
  canvas.text(x0, y1 + 6, label(loX), kText);
  std::string last = label(hiX);
  canvas.text(x1 - kAdvance * static_cast<int>(last.size()), y1 + 6, last,
              kText);
  auto px = [&](double v) {
    return x0 + 1 +
           static_cast<int>(
               std::lround((v - loX) / (hiX - loX) * (x1 - x0 - 2)));
  };
  auto py = [&](double v) {
    return y1 - 2 -
           static_cast<int>(
               std::lround((v - loY) / (hiY - loY) * (y1 - y0 - 4)));
  };
  for (const PlotSeries &series : panel.series) {
    bool drawn = false;
    int lastX = 0, lastY = 0;
    for (auto [vx, vy] : series.points) {
      if (!std::isfinite(vx) || !std::isfinite(vy)) {
        drawn = false;
        continue;
      }
      int cx = px(vx), cy = py(vy);
      if (drawn)
        canvas.line(lastX, lastY, cx, cy, series.rgb);
      else
        canvas.line(cx, cy, cx, cy, series.rgb);
      drawn = true;
      lastX = cx;
      lastY = cy;
    }
  }
}
} // namespace

uint32_t PlotImage::at(int x, int y) const {
  const uint8_t *pixel = &rgb[3 * (static_cast<size_t>(y) * width + x)];
  return (uint32_t{pixel[0]} << 16) | (uint32_t{pixel[1]} << 8) | pixel[2];
}

PlotImage renderPlot(const std::vector<PlotPanel> &panels, int width,
                     int panelHeight) {
  PlotImage image;
  image.width = width;
  image.height = panelHeight * static_cast<int>(panels.size());
  image.rgb.assign(3 * static_cast<size_t>(image.width) * image.height, 0xff);
  Canvas canvas(image);
  for (size_t i = 0; i < panels.size(); ++i)
    drawPanel(canvas, panels[i], static_cast<int>(i) * panelHeight, width,
              panelHeight);
  return image;
}

absl::Status writePlotPng(const std::string &path,
                          const std::vector<PlotPanel> &panels, int width,
                          int panelHeight) {
  if (panels.empty() || width < kLeft + kRight + 10 ||
      panelHeight < kTop + kBottom + 10)
    return absl::InvalidArgumentError(
        absl::StrCat("plot '", path, "': nothing to draw or too small (", width,
                     " x ", panelHeight, " pixels per panel)"));
  PlotImage image = renderPlot(panels, width, panelHeight);
  // libpng's simplified API writes the whole image, or fails saying why.
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_RGB;
  std::string temporary = path + ".partial";
  if (!png_image_write_to_file(&png, temporary.c_str(), 0, image.rgb.data(), 0,
                               nullptr)) {
    std::string message = png.message;
    std::remove(temporary.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot write plot '", path, "': ", message));
  }
  // Renamed into place, so a reader never sees half an image.
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    return absl::UnavailableError(
        absl::StrCat("cannot write plot '", path, "': rename failed"));
  return absl::OkStatus();
}

} // namespace moe::rt::io
