// AlltoallvDirect: all_to_all with per-rank counts (MPI's Alltoallv, PyTorch's
// all_to_all_single with split sizes). Rank r sends send_counts[j] elements
// to rank j, taken consecutively from send (block j starts at the sum of
// send_counts[0..j)), and receives recv_counts[i] elements from rank i into
// recv at the sum of recv_counts[0..i); all transfers progress at once (no
// ordering deadlock). The header to each peer carries that pair's count, so a
// rank whose send_counts[j] differs from rank j's recv_counts[r] is reported
// as a mismatch naming both sides, before a byte of payload is written.
//
// Set up once with the buffers and counts, run() any number of times (each
// run is one collective with a new sequence number). Ownership: borrows the
// communicator, the buffers and the two count arrays (size() counts each),
// which must outlive the object. Thread safety: one run at a time per
// communicator. Failures: see communicator.h.
#pragma once

#include <cstddef>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class AlltoallvDirect {
 public:
  AlltoallvDirect(Communicator& comm, const void* send, const size_t* send_counts, void* recv,
                  const size_t* recv_counts, DataType dtype);
  void run(Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
  const std::byte* send_;
  const size_t* send_counts_;
  std::byte* recv_;
  const size_t* recv_counts_;
  DataType dtype_;
};

}  // namespace cohort::collectives
