#include "cohort/collectives/alltoallv_direct.h"

#include <cstring>

#include "cohort/base/error.h"
#include "cohort/collectives/engine.h"

namespace cohort::collectives {

AlltoallvDirect::AlltoallvDirect(Communicator& comm, const void* send, const size_t* send_counts,
                                 void* recv, const size_t* recv_counts, DataType dtype)
    : comm_(comm),
      send_(static_cast<const std::byte*>(send)),
      send_counts_(send_counts),
      recv_(static_cast<std::byte*>(recv)),
      recv_counts_(recv_counts),
      dtype_(dtype) {
  const auto r = static_cast<size_t>(comm.rank());
  COHORT_CHECK(send_counts[r] == recv_counts[r],
               "all_to_all_v: rank {} of group '{}' sends {} elements to itself (send_counts[{}]) "
               "but expects {} from itself (recv_counts[{}])",
               r, comm.name(), send_counts[r], r, recv_counts[r], r);
}

void AlltoallvDirect::run(Duration timeout) {
  const int n = comm_.size(), r = comm_.rank();
  size_t total = 0;  // what this rank sends: the flight recorder's count
  for (int p = 0; p < n; ++p) total += send_counts_[p];
  Engine e(comm_, {OpKind::kAllToAllV, dtype_, ReduceOp::kSum, Algo::kDirect, -1, total}, timeout);
  const size_t es = e.elem();
  size_t send_at = 0, recv_at = 0, own_send = 0, own_recv = 0;
  for (int p = 0; p < n; ++p) {
    const size_t out = send_counts_[p] * es, in = recv_counts_[p] * es;
    if (p == r) {
      own_send = send_at;
      own_recv = recv_at;
    } else {
      // Every peer gets a header, even for counts of 0: it keeps the
      // sequence numbers in step and carries the pair's two counts, which
      // both ranks of the pair check (wire.h, set_pair_counts).
      Stream& s = e.send(p);
      set_pair_counts(s.header, send_counts_[p], recv_counts_[p]);
      s.add(const_cast<std::byte*>(send_ + send_at), out);
      Stream& g = e.recv(p);
      set_pair_counts(g.header, recv_counts_[p], send_counts_[p]);
      g.add(recv_ + recv_at, in);
    }
    send_at += out;
    recv_at += in;
  }
  e.run();
  if (send_counts_[r] > 0) std::memmove(recv_ + own_recv, send_ + own_send, send_counts_[r] * es);
}

}  // namespace cohort::collectives
