#include "cohort/collectives/broadcast_flat.h"

#include "cohort/collectives/engine.h"

namespace cohort::collectives {

BroadcastFlat::BroadcastFlat(Communicator& comm, void* data, size_t count, DataType dtype, int root)
    : comm_(comm),
      data_(static_cast<std::byte*>(data)),
      count_(count),
      dtype_(dtype),
      root_(root) {}

void BroadcastFlat::run(Duration timeout) {
  Engine e(comm_, {OpKind::kBroadcast, dtype_, ReduceOp::kSum, Algo::kFlat, root_, count_},
           timeout);
  size_t bytes = count_ * e.elem();
  if (e.rank() == root_) {
    for (int p = 0; p < e.size(); ++p) {
      if (p != root_) e.send(p).add(data_, bytes);
    }
  } else {
    e.recv(root_).add(data_, bytes);
  }
  e.run();
}

}  // namespace cohort::collectives
