#include "cohort/collectives/point_to_point.h"

#include <cstring>

#include "cohort/base/error.h"
#include "cohort/collectives/engine.h"

namespace cohort::collectives {

namespace {
void check_peer(const Communicator& comm, int peer, const char* what) {
  COHORT_CHECK(peer >= 0 && peer < comm.size() && peer != comm.rank(),
               "{} in group '{}': peer must be another rank in [0, {}), got {} (this is rank {})",
               what, comm.name(), comm.size(), peer, comm.rank());
}
}  // namespace

void PointToPoint::send(const void* data, size_t count, DataType dtype, int dst, uint32_t tag,
                        Duration timeout) {
  check_peer(comm_, dst, "send");
  comm_.check_usable();
  OpDesc d{OpKind::kSend, dtype, ReduceOp::kSum, Algo::kDirect, -1, count, tag};
  d.seq = comm_.next_send_number(dst);
  Engine e(comm_, d, timeout);
  e.send(dst).add(const_cast<void*>(data), count * e.elem());
  e.run();
}

void PointToPoint::recv(void* data, size_t count, DataType dtype, int src, uint32_t tag,
                        Duration timeout) {
  check_peer(comm_, src, "recv");
  comm_.check_usable();
  OpDesc d{OpKind::kRecv, dtype, ReduceOp::kSum, Algo::kDirect, -1, count, tag};
  d.seq = comm_.next_recv_number(src);
  Engine e(comm_, d, timeout);
  e.recv(src).add(data, count * e.elem());
  e.run();
}

int PointToPoint::recv_any(void* data, size_t count, DataType dtype, uint32_t tag,
                           Duration timeout) {
  COHORT_CHECK(comm_.size() > 1, "recv_any in group '{}': rank {} has no peer to receive from",
               comm_.name(), comm_.rank());
  comm_.check_usable();
  // seq stays 0: each peer's header carries its own pair's number (run_any).
  OpDesc d{OpKind::kRecvAny, dtype, ReduceOp::kSum, Algo::kDirect, -1, count, tag};
  Engine e(comm_, d, timeout);
  return e.run_any(data, count * e.elem());
}

}  // namespace cohort::collectives
