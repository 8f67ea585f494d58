//===- Plot.h - training curves as a PNG image ------------------*- C++ -*-===//
//
// writePlotPng draws panels of line series (a training run's loss and eval
// loss over steps, its throughput) into an RGB PNG, written with libpng:
// each panel framed, its y range and x range labelled at the ends, its
// title and each series' name in the series' colour. The text is a 5x7
// pixel font of the characters the labels use (digits, a few letters and
// signs); a character outside it is drawn as a box.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_RUNTIME_IO_PLOT_H
#define MOE_RUNTIME_IO_PLOT_H

#include "absl/status/status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moe::rt::io {

/// One curve: (x, y) points in x order, drawn joined; non-finite points
/// break the line.
struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
  /// 0xRRGGBB.
  uint32_t rgb = 0x1f77b4;
};

struct PlotPanel {
  std::string title;
  std::vector<PlotSeries> series;
};

/// The panels stacked top to bottom, `width` x `panelHeight` pixels each.
/// Errors name the file.
absl::Status writePlotPng(const std::string &path,
                          const std::vector<PlotPanel> &panels, int width = 800,
                          int panelHeight = 300);

/// An RGB image, 3 bytes per pixel, rows top to bottom (what writePlotPng
/// encodes; exposed for tests).
struct PlotImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  uint32_t at(int x, int y) const;
};
PlotImage renderPlot(const std::vector<PlotPanel> &panels, int width,
                     int panelHeight);

} // namespace moe::rt::io

#endif // MOE_RUNTIME_IO_PLOT_H
