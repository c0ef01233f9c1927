#include "cohort/collectives/scatter_direct.h"

#include <cstring>

#include "cohort/collectives/engine.h"

namespace cohort::collectives {

ScatterDirect::ScatterDirect(Communicator& comm, const void* send, void* recv, size_t count,
                             DataType dtype, int root)
    : comm_(comm),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      count_(count),
      dtype_(dtype),
      root_(root) {}

void ScatterDirect::run(Duration timeout) {
  Engine e(comm_, {OpKind::kScatter, dtype_, ReduceOp::kSum, Algo::kDirect, root_, count_},
           timeout);
  int n = e.size(), r = e.rank();
  size_t bytes = count_ * e.elem();
  if (r == root_) {
    for (int p = 0; p < n; ++p) {
      if (p != r)
        e.send(p).add(const_cast<std::byte*>(send_ + static_cast<size_t>(p) * bytes), bytes);
    }
    e.run();
    if (bytes > 0) std::memmove(recv_, send_ + static_cast<size_t>(r) * bytes, bytes);
  } else {
    e.recv(root_).add(recv_, bytes);
    e.run();
  }
}

}  // namespace cohort::collectives
