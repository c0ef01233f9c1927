// AllreduceDirect: latency-optimal all_reduce for small messages. Every rank sends its buffer to
// every other one at once (one hop through shared memory) and reduces all contributions itself in
// rank order, so all ranks get bitwise identical results. Cost: (n-1) x bytes sent per rank, so
// only for small messages.
//
// Set up once with the buffers, run() any number of times (each run is one
// collective with a new sequence number). Ownership: borrows the
// communicator and the buffers, which must outlive the object. Thread safety:
// one run at a time per communicator. Failures: see communicator.h.
#pragma once

#include <cstddef>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class AllreduceDirect {
 public:
  AllreduceDirect(Communicator& comm, void* data, size_t count, DataType dtype, ReduceOp op);
  void run(Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
  std::byte* data_;
  size_t count_;
  DataType dtype_;
  ReduceOp op_;
};

}  // namespace cohort::collectives
