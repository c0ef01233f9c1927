// WireWriter / WireReader: the little-endian encoding of the small headers
// that parameter-server and distributed-optimizer messages carry (worker
// index, clock, names, tensor shapes). Tensor bytes never go through here:
// they travel as payload buffers of rpc::Message (tensor_message.h).
//
// A reader that runs out of bytes or meets an impossible value throws
// InvalidArgument naming what it was reading: a peer that speaks another
// version of the protocol fails loudly, never with garbage.
// Thread safety: one thread per writer/reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cohort::parallel {

class WireWriter {
 public:
  void u8(uint8_t v) { bytes_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, sizeof(v)); }
  void i64(int64_t v) { raw(&v, sizeof(v)); }
  void f64(double v) { raw(&v, sizeof(v)); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes_.append(s.data(), s.size());
  }
  const std::string& bytes() const { return bytes_; }
  std::string take() { return std::move(bytes_); }

 private:
  void raw(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
};

class WireReader {
 public:
  // `what` names the message in errors ("ps.pull reply").
  WireReader(std::string_view bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  double f64();
  std::string str();
  size_t remaining() const { return bytes_.size() - pos_; }
  // Throws unless every byte was read (a longer message is another protocol).
  void expect_end() const;
  const std::string& what() const { return what_; }

 private:
  void raw(void* p, size_t n);
  std::string_view bytes_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace cohort::parallel
