#include "cohort/collectives/broadcast_pull.h"

#include <vector>

#include "cohort/base/error.h"
#include "cohort/collectives/engine.h"

namespace cohort::collectives {

BroadcastPull::BroadcastPull(Communicator& comm, void* data, size_t count, DataType dtype, int root)
    : comm_(comm),
      data_(static_cast<std::byte*>(data)),
      count_(count),
      dtype_(dtype),
      root_(root) {}

void BroadcastPull::run(Duration timeout) {
  COHORT_CHECK(comm_.single_copy() || comm_.size() == 1,
               "broadcast (pull) in group '{}': needs direct memory reads between all ranks",
               comm_.name());
  Engine e(comm_, {OpKind::kBroadcast, dtype_, ReduceOp::kSum, Algo::kPull, root_, count_},
           timeout);
  const int n = e.size(), r = e.rank();
  if (n == 1) return;
  uint64_t address = reinterpret_cast<uintptr_t>(data_);
  if (r == root_) {
    std::vector<uint64_t> done(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      if (p != r) e.send(p).add(&address, sizeof(address));
    }
    e.run();
    for (int p = 0; p < n; ++p) {
      if (p != r) e.recv(p).add(&done[static_cast<size_t>(p)], sizeof(uint64_t));
    }
    e.run();
    return;
  }
  uint64_t remote = 0;
  e.recv(root_).add(&remote, sizeof(remote));
  e.run();
  try {
    if (count_ > 0) {
      e.comm().context().pair(root_)->read_peer_memory(data_, remote, count_ * e.elem());
    }
  } catch (...) {
    e.fail(std::current_exception());
  }
  uint64_t done = 1;
  e.send(root_).add(&done, sizeof(done));
  e.run();
}

}  // namespace cohort::collectives
