// The TcpStore wire format, shared by client and server. Every message is a
// frame: u32 payload length (little endian) then the payload. Integers are
// little endian; a string/bytes field is u32 length + bytes; a key list is
// u32 count + strings.
//
//   handshake  (client first): u32 kMagic | u32 kVersion | string token
//   reply:                     u8 status (kOk, or kRefused + string reason)
//   request:   u8 Op | fields (below)       reply: u8 Status | fields
//     kSet     key value                    kOk
//     kGet     key u64 timeout_ms           kOk value | kTimeout keys
//     kAdd     key i64 delta                kOk i64 | kError message
//     kCompareSet key expected desired      kOk value
//     kCheck   keys                         kOk u8
//     kDelete  key                          kOk u8
//     kWait    keys u64 timeout_ms          kOk | kTimeout keys
//     kNumKeys                              kOk u64
//     kHeartbeat replica                    kOk
//     kQuorum  replica i64 step u8 failed u32 min_replicas u64 join_ms
//              u64 heartbeat_ms u64 timeout_ms
//                                           kOk u64 id u64 epoch u32 n (replica i64 step)*n
//                                           | kTimeout keys (what the quorum waited for)
// (kHeartbeat and kQuorum: the quorum service, quorum.h.)
// The server enforces kGet/kWait timeouts itself and replies kTimeout with the
// keys still missing, so a connection never carries a stale reply.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous::proto {

inline constexpr uint32_t kMagic = 0x54524843;  // "CHRT"
inline constexpr uint32_t kVersion = 1;
// Frames before the handshake are tiny; this cap keeps a stray connection from
// making the server allocate.
inline constexpr uint32_t kMaxHandshakeFrame = 4096;
inline constexpr uint32_t kMaxFrame = 1u << 30;

enum class Op : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCompareSet = 4,
  kCheck = 5,
  kDelete = 6,
  kWait = 7,
  kNumKeys = 8,
  kHeartbeat = 9,
  kQuorum = 10,
};

enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2, kRefused = 3 };

// Appends fields to a frame; finish() fills in the length prefix.
class Encoder {
 public:
  Encoder() : buf_(4, 0) {}
  Encoder& u8(uint8_t v);
  Encoder& u32(uint32_t v);
  Encoder& u64(uint64_t v);
  Encoder& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Encoder& bytes(const uint8_t* data, size_t n);
  Encoder& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }
  Encoder& str(const std::string& s) {
    return bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  Encoder& keys(const std::vector<std::string>& ks);
  // The whole frame, length prefix included.
  std::vector<uint8_t> finish() &&;

 private:
  std::vector<uint8_t> buf_;
};

// Reads fields from one payload; throws IoError("malformed ...") on overrun.
class Decoder {
 public:
  Decoder(const uint8_t* data, size_t n) : p_(data), end_(data + n) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  Bytes bytes();
  std::string str();
  std::vector<std::string> keys();
  bool done() const { return p_ == end_; }

 private:
  void need(size_t n);
  const uint8_t* p_;
  const uint8_t* end_;
};

uint32_t read_u32_le(const uint8_t* p);

}  // namespace cohort::rendezvous::proto
