#include "cohort/collectives/allgather_ring.h"

#include <cstring>

#include "cohort/collectives/engine.h"
#include "cohort/collectives/ring.h"

namespace cohort::collectives {

AllgatherRing::AllgatherRing(Communicator& comm, const void* send, void* recv, size_t count,
                             DataType dtype)
    : comm_(comm),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      count_(count),
      dtype_(dtype) {}

void AllgatherRing::run(Duration timeout) {
  Engine e(comm_, {OpKind::kAllGather, dtype_, ReduceOp::kSum, Algo::kRing, -1, count_}, timeout);
  int n = e.size(), r = e.rank();
  size_t bytes = count_ * e.elem();
  if (bytes > 0) std::memmove(recv_ + static_cast<size_t>(r) * bytes, send_, bytes);
  if (n > 1) {
    Blocks b{count_ * static_cast<size_t>(n), n};
    Stream& out = e.send((r + 1) % n);
    Stream& in = e.recv((r + n - 1) % n);
    out.reserve(static_cast<size_t>(n));
    in.reserve(static_cast<size_t>(n));
    add_ring_all_gather(out, in, recv_, b, e.elem(), r, nullptr);
    e.run();
  }
}

}  // namespace cohort::collectives
