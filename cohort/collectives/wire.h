// What every op sends ahead of its payload to each peer it talks to: a
// 32-byte header naming the op, its sequence number, count, dtype, reduction,
// root, tag and algorithm. The receiver compares it with what it called
// itself before touching a byte of payload, which is how mismatched
// collectives are caught (and reported with both sides) instead of corrupting
// memory. Internal to the collectives layer.
#pragma once

#include <cstdint>
#include <string>

#include "cohort/collectives/op_table.h"
#include "cohort/collectives/types.h"

namespace cohort::collectives {

// One op as this rank called it (kinds and names: op_table.h). seq: the
// collective sequence number, or the per-pair message number for send/recv
// (filled in by the Engine).
struct OpDesc {
  OpKind kind;
  DataType dtype = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  Algo algo = Algo::kNone;
  int32_t root = -1;
  uint64_t count = 0;
  uint32_t tag = 0;
  uint64_t seq = 0;
};

inline constexpr uint32_t kWireMagic = 0x50525043;  // "CPRP"

struct WireHeader {
  uint32_t magic;
  uint8_t kind;
  uint8_t dtype;
  uint8_t op;
  uint8_t algo;
  uint64_t seq;
  uint64_t count;
  int32_t root;
  uint32_t tag;
};
static_assert(sizeof(WireHeader) == 32);

WireHeader to_wire(const OpDesc& d);

// all_to_all_v's header to or from one peer carries both counts of the pair:
// `count` the elements of the message it leads, root and tag (unused by the
// op) the high and low halves of the count going the other way. Each side
// then detects a disagreement in either direction.
inline void set_pair_counts(WireHeader& h, uint64_t this_way, uint64_t other_way) {
  h.count = this_way;
  h.root = static_cast<int32_t>(static_cast<uint32_t>(other_way >> 32));
  h.tag = static_cast<uint32_t>(other_way);
}
inline uint64_t other_way_count(const WireHeader& h) {
  return uint64_t{static_cast<uint32_t>(h.root)} << 32 | h.tag;
}
// "all_reduce #5 (count=10, dtype=float32, op=sum, algo=ring)"; recv_any has
// no number: "recv_any (count=1, dtype=float32, tag=3, algo=direct)".
std::string describe(const WireHeader& h);
std::string describe(const OpDesc& d);

}  // namespace cohort::collectives
