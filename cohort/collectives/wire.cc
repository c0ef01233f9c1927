#include "cohort/collectives/wire.h"

#include <fmt/format.h>

namespace cohort::collectives {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatter:
      return "scatter";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kSendRecv:
      return "send/recv";
  }
  return "unknown op";
}

const char* algo_name(Algo algo) {
  switch (algo) {
    case Algo::kNone:
      return "-";
    case Algo::kDirect:
      return "direct";
    case Algo::kRing:
      return "ring";
    case Algo::kFlat:
      return "flat";
    case Algo::kChain:
      return "chain";
    case Algo::kPull:
      return "pull";
  }
  return "unknown";
}

WireHeader to_wire(const OpDesc& d) {
  return WireHeader{kWireMagic,
                    static_cast<uint8_t>(d.kind),
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
  std::string s = fmt::format("{} #{} (count={}, dtype={}", op_kind_name(kind), h.seq, h.count,
                              dtype_name(static_cast<DataType>(h.dtype)));
  if (kind == OpKind::kAllReduce || kind == OpKind::kReduce || kind == OpKind::kReduceScatter) {
    s += fmt::format(", op={}", reduce_op_name(static_cast<ReduceOp>(h.op)));
  }
  if (h.root >= 0) s += fmt::format(", root={}", h.root);
  if (kind == OpKind::kSendRecv) s += fmt::format(", tag={}", h.tag);
  s += fmt::format(", algo={})", algo_name(static_cast<Algo>(h.algo)));
  return s;
}

std::string describe(const OpDesc& d) { return describe(to_wire(d)); }

}  // namespace cohort::collectives
