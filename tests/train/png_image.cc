#include "tests/train/png_image.h"

#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace cohort::test {
namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

int paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

}  // namespace

PngImage PngImage::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kSignature, 8) != 0)
    throw std::runtime_error(path + ": not a PNG file");
  PngImage img;
  std::vector<uint8_t> idat;
  for (size_t pos = 8; pos + 12 <= bytes.size();) {
    const uint32_t len = be32(&bytes[pos]);
    const std::string type(reinterpret_cast<const char*>(&bytes[pos + 4]), 4);
    const uint8_t* data = &bytes[pos + 8];
    if (pos + 12 + len > bytes.size()) throw std::runtime_error(path + ": truncated chunk " + type);
    if (type == "IHDR") {
      img.width_ = static_cast<int>(be32(data));
      img.height_ = static_cast<int>(be32(data + 4));
      const int depth = data[8], color = data[9], interlace = data[12];
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
        throw std::runtime_error(
            path + ": only 8-bit RGB/RGBA non-interlaced PNGs are read (depth " +
            std::to_string(depth) + ", colour type " + std::to_string(color) + ")");
      }
      img.channels_ = color == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat.insert(idat.end(), data, data + len);
    } else if (type == "IEND") {
      break;
    }
    pos += 12 + len;
  }
  const size_t stride = static_cast<size_t>(img.width_) * static_cast<size_t>(img.channels_);
  std::vector<uint8_t> raw((stride + 1) * static_cast<size_t>(img.height_));
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, idat.data(), idat.size()) != Z_OK || raw_len != raw.size())
    throw std::runtime_error(path + ": image data does not inflate to its size");
  img.pixels_.resize(stride * static_cast<size_t>(img.height_));
  const size_t bpp = static_cast<size_t>(img.channels_);
  for (size_t y = 0; y < static_cast<size_t>(img.height_); ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* src = &raw[y * (stride + 1) + 1];
    uint8_t* row = &img.pixels_[y * stride];
    const uint8_t* up = y > 0 ? &img.pixels_[(y - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? row[i - bpp] : 0;
      const int b = up != nullptr ? up[i] : 0;
      const int c = (up != nullptr && i >= bpp) ? up[i - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 0:
          pred = 0;
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4:
          pred = paeth(a, b, c);
          break;
        default:
          throw std::runtime_error(path + ": bad filter type " + std::to_string(filter));
      }
      row[i] = static_cast<uint8_t>(src[i] + pred);
    }
  }
  return img;
}

Rgb PngImage::at(int x, int y) const {
  const uint8_t* p =
      &pixels_[(static_cast<size_t>(y) * static_cast<size_t>(width_) + static_cast<size_t>(x)) *
               static_cast<size_t>(channels_)];
  if (channels_ == 3) return {p[0], p[1], p[2]};
  auto over_white = [&](uint8_t v) {
    return static_cast<uint8_t>((v * p[3] + 255 * (255 - p[3])) / 255);
  };
  return {over_white(p[0]), over_white(p[1]), over_white(p[2])};
}

Rgb parse_color(const std::string& hex) {
  const unsigned long v = std::stoul(hex.substr(1), nullptr, 16);
  return {static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
}

bool near(Rgb a, Rgb c, int tolerance) {
  return std::abs(a.r - c.r) <= tolerance && std::abs(a.g - c.g) <= tolerance &&
         std::abs(a.b - c.b) <= tolerance;
}

}  // namespace cohort::test
