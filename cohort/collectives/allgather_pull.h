// AllgatherPull: single-copy all_gather for ranks on one host that may read
// each other's memory (Communicator::single_copy()): ranks swap the
// addresses of their send buffers, copy every other rank's block straight
// out of its owner's send buffer (process_vm_readv), and confirm to each
// other that they are done before anyone returns.
//
// Set up once, run() many times. Ownership: borrows communicator and buffers.
// Thread safety: one run at a time per communicator. Failures: communicator.h.
#pragma once

#include <cstddef>
#include <vector>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class AllgatherPull {
 public:
  AllgatherPull(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype);
  void run(Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
  const std::byte* send_;
  std::byte* recv_;
  size_t count_;
  DataType dtype_;
  std::vector<uint64_t> addresses_;
  std::vector<uint64_t> signals_;
};

}  // namespace cohort::collectives
