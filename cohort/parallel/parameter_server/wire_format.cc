#include "cohort/parallel/parameter_server/wire_format.h"

#include <fmt/format.h>

#include <cstring>

#include "cohort/base/error.h"

namespace cohort::parallel {

void WireReader::raw(void* p, size_t n) {
  if (n > remaining())
    throw InvalidArgument(fmt::format("{}: truncated message ({} bytes, needed {} at offset {})",
                                      what_, bytes_.size(), n, pos_));
  std::memcpy(p, bytes_.data() + pos_, n);
  pos_ += n;
}

uint8_t WireReader::u8() {
  uint8_t v = 0;
  raw(&v, sizeof(v));
  return v;
}

uint32_t WireReader::u32() {
  uint32_t v = 0;
  raw(&v, sizeof(v));
  return v;
}

int64_t WireReader::i64() {
  int64_t v = 0;
  raw(&v, sizeof(v));
  return v;
}

double WireReader::f64() {
  double v = 0;
  raw(&v, sizeof(v));
  return v;
}

std::string WireReader::str() {
  const uint32_t n = u32();
  if (n > remaining())
    throw InvalidArgument(
        fmt::format("{}: string of {} bytes with only {} left", what_, n, remaining()));
  std::string s(bytes_.substr(pos_, n));
  pos_ += n;
  return s;
}

void WireReader::expect_end() const {
  if (remaining() != 0)
    throw InvalidArgument(
        fmt::format("{}: {} unexpected bytes at the end of the message", what_, remaining()));
}

}  // namespace cohort::parallel
