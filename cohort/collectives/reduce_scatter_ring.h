// ReduceScatterRing: reduce_scatter for large messages: the ring reduce-scatter (on a scratch copy
// of the input), each rank finishing its own block.
//
// Set up once with the buffers, run() any number of times (each run is one
// collective with a new sequence number). Ownership: borrows the
// communicator and the buffers, which must outlive the object. Thread safety:
// one run at a time per communicator. Failures: see communicator.h.
#pragma once

#include <cstddef>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class ReduceScatterRing {
 public:
  ReduceScatterRing(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype,
                    ReduceOp op);
  void run(Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
  const std::byte* send_;
  std::byte* recv_;
  size_t count_;
  DataType dtype_;
  ReduceOp op_;
};

}  // namespace cohort::collectives
