// A minimal PNG reader for tests that look at a rendered picture the way a
// person would (where are the dark axis lines, where is a curve's colour):
// 8-bit RGB or RGBA, non-interlaced, which is what rsvg-convert writes.
// Errors: std::runtime_error naming what the file holds instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::test {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

class PngImage {
 public:
  static PngImage read(const std::string& path);

  int width() const { return width_; }
  int height() const { return height_; }
  // Composited over white when the image has alpha.
  Rgb at(int x, int y) const;

 private:
  int width_ = 0, height_ = 0, channels_ = 3;
  std::vector<uint8_t> pixels_;  // rows of width * channels bytes, unfiltered
};

// "#rrggbb" -> Rgb.
Rgb parse_color(const std::string& hex);
// Whether every channel is within `tolerance` of c's.
bool near(Rgb a, Rgb c, int tolerance = 40);

}  // namespace cohort::test
