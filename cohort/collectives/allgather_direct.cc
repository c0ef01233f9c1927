#include "cohort/collectives/allgather_direct.h"

#include <cstring>

#include "cohort/collectives/engine.h"

namespace cohort::collectives {

AllgatherDirect::AllgatherDirect(Communicator& comm, const void* send, void* recv, size_t count,
                                 DataType dtype)
    : comm_(comm),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      count_(count),
      dtype_(dtype) {}

void AllgatherDirect::run(Duration timeout) {
  Engine e(comm_, {OpKind::kAllGather, dtype_, ReduceOp::kSum, Algo::kDirect, -1, count_}, timeout);
  int n = e.size(), r = e.rank();
  size_t bytes = count_ * e.elem();
  if (bytes > 0) std::memmove(recv_ + static_cast<size_t>(r) * bytes, send_, bytes);
  const std::byte* mine = recv_ + static_cast<size_t>(r) * bytes;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    e.send(p).add(const_cast<std::byte*>(mine), bytes);
    e.recv(p).add(recv_ + static_cast<size_t>(p) * bytes, bytes);
  }
  e.run();
}

}  // namespace cohort::collectives
