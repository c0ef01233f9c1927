// AllreduceRing: bandwidth-optimal all_reduce for large messages. Reduce-scatter then all-gather
// around the ring rank -> rank+1; each rank sends 2(n-1)/n of the buffer, blocks are forwarded
// while they stream in (pipelined), and received bytes are reduced straight out of shared memory.
// Every element is reduced once, on one rank, so all ranks get bitwise identical results.
//
// Set up once with the buffers, run() any number of times (each run is one
// collective with a new sequence number). Ownership: borrows the
// communicator and the buffers, which must outlive the object. Thread safety:
// one run at a time per communicator. Failures: see communicator.h.
#pragma once

#include <cstddef>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class AllreduceRing {
 public:
  AllreduceRing(Communicator& comm, void* data, size_t count, DataType dtype, ReduceOp op);
  void run(Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
  std::byte* data_;
  size_t count_;
  DataType dtype_;
  ReduceOp op_;
};

}  // namespace cohort::collectives
