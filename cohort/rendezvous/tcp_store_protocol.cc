#include "cohort/rendezvous/tcp_store_protocol.h"

#include <cstring>

#include "cohort/base/error.h"

namespace cohort::rendezvous::proto {

uint32_t read_u32_le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

Encoder& Encoder::u8(uint8_t v) {
  buf_.push_back(v);
  return *this;
}

Encoder& Encoder::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

Encoder& Encoder::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

Encoder& Encoder::bytes(const uint8_t* data, size_t n) {
  COHORT_CHECK(n <= kMaxFrame, "TcpStore: value of {} bytes exceeds the {} byte limit", n,
               kMaxFrame);
  u32(static_cast<uint32_t>(n));
  buf_.insert(buf_.end(), data, data + n);
  return *this;
}

Encoder& Encoder::keys(const std::vector<std::string>& ks) {
  u32(static_cast<uint32_t>(ks.size()));
  for (const auto& k : ks) str(k);
  return *this;
}

std::vector<uint8_t> Encoder::finish() && {
  size_t payload = buf_.size() - 4;
  COHORT_CHECK(payload <= kMaxFrame, "TcpStore: message of {} bytes exceeds the {} byte limit",
               payload, kMaxFrame);
  for (int i = 0; i < 4; ++i) buf_[i] = static_cast<uint8_t>(payload >> (8 * i));
  return std::move(buf_);
}

void Decoder::need(size_t n) {
  if (static_cast<size_t>(end_ - p_) < n) {
    throw IoError("TcpStore: malformed message (field runs past the end of the frame)");
  }
}

uint8_t Decoder::u8() {
  need(1);
  return *p_++;
}

uint32_t Decoder::u32() {
  need(4);
  uint32_t v = read_u32_le(p_);
  p_ += 4;
  return v;
}

uint64_t Decoder::u64() {
  need(8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
  p_ += 8;
  return v;
}

Bytes Decoder::bytes() {
  uint32_t n = u32();
  need(n);
  Bytes out(p_, p_ + n);
  p_ += n;
  return out;
}

std::string Decoder::str() {
  uint32_t n = u32();
  need(n);
  std::string out(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return out;
}

std::vector<std::string> Decoder::keys() {
  uint32_t n = u32();
  // Each key needs at least its 4-byte length; reject counts the frame cannot hold.
  need(static_cast<size_t>(n) * 4);
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(str());
  return out;
}

}  // namespace cohort::rendezvous::proto
