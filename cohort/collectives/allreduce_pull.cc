#include "cohort/collectives/allreduce_pull.h"

#include "cohort/base/error.h"
#include "cohort/collectives/engine.h"
#include "cohort/collectives/reduce_kernels.h"
#include "cohort/collectives/ring.h"

namespace cohort::collectives {

namespace {
// Bytes pulled per read while reducing: fits in L2 with the block it is added to.
constexpr size_t kPullChunk = 256 * 1024;
}  // namespace

AllreducePull::AllreducePull(Communicator& comm, void* data, size_t count, DataType dtype,
                             ReduceOp op)
    : comm_(comm),
      data_(static_cast<std::byte*>(data)),
      count_(count),
      dtype_(dtype),
      op_(op),
      addresses_(static_cast<size_t>(comm.size())),
      signals_(static_cast<size_t>(comm.size())) {}

void AllreducePull::run(Duration timeout) {
  COHORT_CHECK(comm_.single_copy() || comm_.size() == 1,
               "all_reduce (pull) in group '{}': needs every rank on one host with direct memory "
               "reads between them",
               comm_.name());
  Engine e(comm_, {OpKind::kAllReduce, dtype_, op_, Algo::kPull, -1, count_}, timeout);
  const int n = e.size(), r = e.rank();
  const size_t elem = e.elem();
  if (n > 1) {
    uint64_t mine = reinterpret_cast<uintptr_t>(data_);
    uint64_t step = 1;
    // 1: buffers are ready; swap their addresses.
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      e.send(p).add(&mine, sizeof(mine));
      e.recv(p).add(&addresses_[static_cast<size_t>(p)], sizeof(uint64_t));
    }
    e.run();
    auto exchange_signal = [&] {
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        e.send(p).add(&step, sizeof(step));
        e.recv(p).add(&signals_[static_cast<size_t>(p)], sizeof(uint64_t));
      }
      e.run();
    };
    Blocks b{count_, n};
    try {
      // 2: reduce block r from every peer's copy of it (they only write
      // block r of their own buffers after step 3).
      std::byte* tmp = comm_.scratch(kPullChunk);
      size_t off = b.offset(r) * elem, len = b.length(r) * elem;
      size_t chunk = kPullChunk / elem * elem;
      for (size_t c = 0; c < len; c += chunk) {
        size_t k = std::min(chunk, len - c);
        for (int p = 0; p < n; ++p) {
          if (p == r) continue;
          e.comm().context().pair(p)->read_peer_memory(
              tmp, addresses_[static_cast<size_t>(p)] + off + c, k);
          reduce_into(data_ + off + c, tmp, k / elem, dtype_, op_);
        }
      }
    } catch (...) {
      e.fail(std::current_exception());
    }
    // 3: all blocks final.
    step = 2;
    exchange_signal();
    try {
      // 4: copy the other blocks from their owners.
      for (int p = 0; p < n; ++p) {
        if (p == r || b.length(p) == 0) continue;
        size_t off = b.offset(p) * elem;
        e.comm().context().pair(p)->read_peer_memory(
            data_ + off, addresses_[static_cast<size_t>(p)] + off, b.length(p) * elem);
      }
    } catch (...) {
      e.fail(std::current_exception());
    }
    // 5: nobody reads this buffer any more; it is the caller's again.
    step = 3;
    exchange_signal();
  }
  if (op_ == ReduceOp::kAvg) finish_avg(data_, count_, dtype_, n);
}

}  // namespace cohort::collectives
