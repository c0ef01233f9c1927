#include "cohort/collectives/broadcast_chain.h"

#include "cohort/collectives/engine.h"

namespace cohort::collectives {

BroadcastChain::BroadcastChain(Communicator& comm, void* data, size_t count, DataType dtype,
                               int root)
    : comm_(comm),
      data_(static_cast<std::byte*>(data)),
      count_(count),
      dtype_(dtype),
      root_(root) {}

void BroadcastChain::run(Duration timeout) {
  Engine e(comm_, {OpKind::kBroadcast, dtype_, ReduceOp::kSum, Algo::kChain, root_, count_},
           timeout);
  int n = e.size();
  int pos = (e.rank() - root_ + n) % n;
  size_t bytes = count_ * e.elem();
  const Piece* got = nullptr;
  if (pos > 0) got = e.recv((root_ + pos - 1) % n).add(data_, bytes);
  if (pos < n - 1) e.send((root_ + pos + 1) % n).add(data_, bytes, got);
  e.run();
}

}  // namespace cohort::collectives
