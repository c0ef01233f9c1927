#include "cohort/collectives/allgather_pull.h"

#include <cstring>

#include "cohort/base/error.h"
#include "cohort/collectives/engine.h"

namespace cohort::collectives {

AllgatherPull::AllgatherPull(Communicator& comm, const void* send, void* recv, size_t count,
                             DataType dtype)
    : comm_(comm),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      count_(count),
      dtype_(dtype),
      addresses_(static_cast<size_t>(comm.size())),
      signals_(static_cast<size_t>(comm.size())) {}

void AllgatherPull::run(Duration timeout) {
  COHORT_CHECK(comm_.single_copy() || comm_.size() == 1,
               "all_gather (pull) in group '{}': needs direct memory reads between all ranks",
               comm_.name());
  Engine e(comm_, {OpKind::kAllGather, dtype_, ReduceOp::kSum, Algo::kPull, -1, count_}, timeout);
  const int n = e.size(), r = e.rank();
  const size_t bytes = count_ * e.elem();
  if (bytes > 0) std::memmove(recv_ + static_cast<size_t>(r) * bytes, send_, bytes);
  if (n == 1) return;
  uint64_t mine = reinterpret_cast<uintptr_t>(send_);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    e.send(p).add(&mine, sizeof(mine));
    e.recv(p).add(&addresses_[static_cast<size_t>(p)], sizeof(uint64_t));
  }
  e.run();
  try {
    for (int p = 0; p < n && bytes > 0; ++p) {
      if (p == r) continue;
      e.comm().context().pair(p)->read_peer_memory(recv_ + static_cast<size_t>(p) * bytes,
                                                   addresses_[static_cast<size_t>(p)], bytes);
    }
  } catch (...) {
    e.fail(std::current_exception());
  }
  // Send buffers stay readable until everyone has its copy.
  uint64_t done = 1;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    e.send(p).add(&done, sizeof(done));
    e.recv(p).add(&signals_[static_cast<size_t>(p)], sizeof(uint64_t));
  }
  e.run();
}

}  // namespace cohort::collectives
