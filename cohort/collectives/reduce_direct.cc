#include "cohort/collectives/reduce_direct.h"

#include <cstring>

#include "cohort/collectives/engine.h"
#include "cohort/collectives/reduce_kernels.h"

namespace cohort::collectives {

ReduceDirect::ReduceDirect(Communicator& comm, void* data, size_t count, DataType dtype,
                           ReduceOp op, int root)
    : comm_(comm),
      data_(static_cast<std::byte*>(data)),
      count_(count),
      dtype_(dtype),
      op_(op),
      root_(root) {}

void ReduceDirect::run(Duration timeout) {
  Engine e(comm_, {OpKind::kReduce, dtype_, op_, Algo::kDirect, root_, count_}, timeout);
  int n = e.size(), r = e.rank();
  size_t bytes = count_ * e.elem();
  if (r != root_) {
    e.send(root_).add(data_, bytes);
    e.run();
    return;
  }
  if (n > 1) {
    std::byte* scratch = comm_.scratch(bytes * static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      if (p != r) e.recv(p).add(scratch + static_cast<size_t>(p) * bytes, bytes);
    }
    e.run();
    if (r != 0 && bytes > 0) {
      std::memcpy(scratch + static_cast<size_t>(r) * bytes, data_, bytes);
      std::memcpy(data_, scratch, bytes);
    }
    for (int p = 1; p < n; ++p) {
      reduce_into(data_, scratch + static_cast<size_t>(p) * bytes, count_, dtype_, op_);
    }
  }
  if (op_ == ReduceOp::kAvg) finish_avg(data_, count_, dtype_, n);
}

}  // namespace cohort::collectives
