#include "cohort/data/idx_reader.h"

#include <zlib.h>

#include <cstring>
#include <memory>

namespace cohort::data {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct ElementType {
  int width;  // bytes in the file
  DType dtype;
};

bool element_type(uint8_t code, ElementType* out) {
  switch (code) {
    case 0x08:
      *out = {1, DType::kUInt8};
      return true;
    case 0x09:
      *out = {1, DType::kInt32};
      return true;
    case 0x0B:
      *out = {2, DType::kInt32};
      return true;
    case 0x0C:
      *out = {4, DType::kInt32};
      return true;
    case 0x0D:
      *out = {4, DType::kFloat32};
      return true;
    case 0x0E:
      *out = {8, DType::kFloat64};
      return true;
    default:
      return false;
  }
}

// Converts big-endian elements to the tensor's dtype.
void decode(const uint8_t* src, uint8_t code, int64_t n, void* dst) {
  switch (code) {
    case 0x08:
      std::memcpy(dst, src, static_cast<size_t>(n));
      break;
    case 0x09: {
      auto* d = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int8_t>(src[i]);
      break;
    }
    case 0x0B: {
      auto* d = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < n; ++i)
        d[i] = static_cast<int16_t>((uint16_t{src[2 * i]} << 8) | src[2 * i + 1]);
      break;
    }
    case 0x0C:
    case 0x0D: {
      auto* d = static_cast<uint32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = load_be32(src + 4 * i);
      break;
    }
    case 0x0E: {
      auto* d = static_cast<uint64_t*>(dst);
      for (int64_t i = 0; i < n; ++i)
        d[i] = (uint64_t{load_be32(src + 8 * i)} << 32) | load_be32(src + 8 * i + 4);
      break;
    }
  }
}

}  // namespace

std::string read_maybe_gzip(const std::string& path, const char* op) {
  // gzread reads plain files transparently, so one path handles both.
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) throw_errno(fmt::format("{}: cannot open '{}'", op, path), errno);
  gzbuffer(f.get(), 1 << 17);
  std::string data;
  std::vector<char> chunk(1 << 20);
  for (;;) {
    int n = gzread(f.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(f.get(), &err);
      throw IoError(fmt::format("{}: '{}' is corrupt or not readable: {}", op, path, msg));
    }
    if (n == 0) break;
    data.append(chunk.data(), static_cast<size_t>(n));
  }
  // A gzip stream cut short ends with Z_BUF_ERROR instead of a clean EOF.
  int err = Z_OK;
  const char* msg = gzerror(f.get(), &err);
  if (err != Z_OK && err != Z_STREAM_END)
    throw IoError(fmt::format("{}: '{}' is a truncated or corrupt gzip file: {}", op, path, msg));
  return data;
}

Tensor read_idx(const std::string& path) {
  const std::string data = read_maybe_gzip(path);
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  const size_t size = data.size();
  if (size < 4 || p[0] != 0 || p[1] != 0)
    throw IoError(
        fmt::format("read_idx: '{}' is not an IDX file (bad magic; {} bytes)", path, size));
  ElementType type{};
  if (!element_type(p[2], &type))
    throw IoError(fmt::format("read_idx: '{}' is not an IDX file (unknown element type 0x{:02x})",
                              path, p[2]));
  const int ndims = p[3];
  if (ndims == 0)
    throw IoError(fmt::format("read_idx: '{}' is not an IDX file (0 dimensions)", path));
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (size < header)
    throw IoError(fmt::format("read_idx: '{}' is truncated: header needs {} bytes, file has {}",
                              path, header, size));
  Shape dims(static_cast<size_t>(ndims));
  // Bounded by the file size below, so the product cannot overflow silently.
  unsigned __int128 elements = 1;
  for (int d = 0; d < ndims; ++d) {
    dims[static_cast<size_t>(d)] = load_be32(p + 4 + 4 * d);
    elements *= static_cast<uint64_t>(dims[static_cast<size_t>(d)]);
  }
  const unsigned __int128 want = elements * static_cast<unsigned>(type.width);
  const size_t have = size - header;
  if (want > have)
    throw IoError(
        fmt::format("read_idx: '{}' is truncated: dims {} need {} data bytes, file has {}", path,
                    shape_str(dims), static_cast<uint64_t>(want), have));
  if (want < have)
    throw IoError(fmt::format("read_idx: '{}' has {} trailing bytes after the data of dims {}",
                              path, have - static_cast<size_t>(want), shape_str(dims)));
  Tensor out = Tensor::empty(dims, type.dtype);
  decode(p + header, p[2], static_cast<int64_t>(elements), out.raw_data());
  return out;
}

}  // namespace cohort::data
