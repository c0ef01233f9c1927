// ReduceScatterDirect: every rank sends block j of its input to rank j and reduces the n
// contributions to its own block in rank order (small messages).
//
// Set up once with the buffers, run() any number of times (each run is one
// collective with a new sequence number). Ownership: borrows the
// communicator and the buffers, which must outlive the object. Thread safety:
// one run at a time per communicator. Failures: see communicator.h.
#pragma once

#include <cstddef>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class ReduceScatterDirect {
 public:
  ReduceScatterDirect(Communicator& comm, const void* send, void* recv, size_t count,
                      DataType dtype, ReduceOp op);
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
