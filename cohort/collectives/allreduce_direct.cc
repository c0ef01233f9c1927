#include "cohort/collectives/allreduce_direct.h"

#include <cstring>

#include "cohort/collectives/engine.h"
#include "cohort/collectives/reduce_kernels.h"

namespace cohort::collectives {

AllreduceDirect::AllreduceDirect(Communicator& comm, void* data, size_t count, DataType dtype,
                                 ReduceOp op)
    : comm_(comm), data_(static_cast<std::byte*>(data)), count_(count), dtype_(dtype), op_(op) {}

void AllreduceDirect::run(Duration timeout) {
  Engine e(comm_, {OpKind::kAllReduce, dtype_, op_, Algo::kDirect, -1, count_}, timeout);
  int n = e.size(), r = e.rank();
  size_t bytes = count_ * e.elem();
  if (n > 1) {
    std::byte* scratch = comm_.scratch(bytes * static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      e.send(p).add(data_, bytes);
      e.recv(p).add(scratch + static_cast<size_t>(p) * bytes, bytes);
    }
    e.run();
    // Reduce in rank order on every rank so all get the same bits.
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
