// AlltoallDirect: every rank sends block j to rank j and receives block i from rank i, all
// transfers progressing at once (no ordering deadlock).
//
// Set up once with the buffers, run() any number of times (each run is one
// collective with a new sequence number). Ownership: borrows the
// communicator and the buffers, which must outlive the object. Thread safety:
// one run at a time per communicator. Failures: see communicator.h.
#pragma once

#include <cstddef>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class AlltoallDirect {
 public:
  AlltoallDirect(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype);
  void run(Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
  const std::byte* send_;
  std::byte* recv_;
  size_t count_;
  DataType dtype_;
};

}  // namespace cohort::collectives
