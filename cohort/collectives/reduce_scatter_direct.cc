#include "cohort/collectives/reduce_scatter_direct.h"

#include <cstring>

#include "cohort/collectives/engine.h"
#include "cohort/collectives/reduce_kernels.h"

namespace cohort::collectives {

ReduceScatterDirect::ReduceScatterDirect(Communicator& comm, const void* send, void* recv,
                                         size_t count, DataType dtype, ReduceOp op)
    : comm_(comm),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      count_(count),
      dtype_(dtype),
      op_(op) {}

void ReduceScatterDirect::run(Duration timeout) {
  Engine e(comm_, {OpKind::kReduceScatter, dtype_, op_, Algo::kDirect, -1, count_}, timeout);
  int n = e.size(), r = e.rank();
  size_t bytes = count_ * e.elem();
  std::byte* scratch = comm_.scratch(bytes * static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    e.send(p).add(const_cast<std::byte*>(send_ + static_cast<size_t>(p) * bytes), bytes);
    e.recv(p).add(scratch + static_cast<size_t>(p) * bytes, bytes);
  }
  e.run();
  const std::byte* mine = send_ + static_cast<size_t>(r) * bytes;
  if (bytes > 0) std::memcpy(recv_, r == 0 ? mine : scratch, bytes);
  for (int p = 1; p < n; ++p) {
    reduce_into(recv_, p == r ? mine : scratch + static_cast<size_t>(p) * bytes, count_, dtype_,
                op_);
  }
  if (op_ == ReduceOp::kAvg) finish_avg(recv_, count_, dtype_, n);
}

}  // namespace cohort::collectives
