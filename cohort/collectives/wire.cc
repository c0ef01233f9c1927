#include "cohort/collectives/wire.h"

#include <fmt/format.h>

namespace cohort::collectives {

WireHeader to_wire(const OpDesc& d) {
  return WireHeader{kWireMagic,
                    static_cast<uint8_t>(op_info(d.kind).wire_kind),
                    static_cast<uint8_t>(d.dtype),
                    static_cast<uint8_t>(d.op),
                    static_cast<uint8_t>(d.algo),
                    d.seq,
                    d.count,
                    d.root,
                    d.tag};
}

std::string describe(const WireHeader& h) {
  auto kind = static_cast<OpKind>(h.kind);
  // A header from a peer may carry any byte: name what is not an op as such.
  const bool known = h.kind >= 1 && h.kind < kNumOpKinds;
  // recv_any has no number of its own: it takes the sender's per-pair number.
  std::string s = known && kind == OpKind::kRecvAny
                      ? std::string(op_kind_name(kind))
                      : fmt::format("{} #{}", op_kind_name(kind), h.seq);
  s += fmt::format(" (count={}, dtype={}", h.count, dtype_name(static_cast<DataType>(h.dtype)));
  if (known && op_info(kind).reduces) {
    s += fmt::format(", op={}", reduce_op_name(static_cast<ReduceOp>(h.op)));
  }
  // all_to_all_v's root and tag hold its reverse count (set_pair_counts).
  const bool pair_counts = h.kind == static_cast<uint8_t>(OpKind::kAllToAllV);
  if (h.root >= 0 && !pair_counts) s += fmt::format(", root={}", h.root);
  if (known && op_info(kind).has_tag) s += fmt::format(", tag={}", h.tag);
  s += fmt::format(", algo={})", algo_name(static_cast<Algo>(h.algo)));
  return s;
}

std::string describe(const OpDesc& d) {
  // This rank's own op by its own name (a recv's header travels as kSend).
  WireHeader h = to_wire(d);
  h.kind = static_cast<uint8_t>(d.kind);
  return describe(h);
}

}  // namespace cohort::collectives
