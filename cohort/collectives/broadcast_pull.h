// BroadcastPull: single-copy broadcast for ranks on one host that may read
// each other's memory (Communicator::single_copy()): the root sends its
// buffer's address, every other rank copies the buffer straight out of the
// root's memory (process_vm_readv) and then tells the root it is done, so
// the root returns only when its buffer is no longer read.
//
// Set up once, run() many times. Ownership: borrows communicator and buffer.
// Thread safety: one run at a time per communicator. Failures: communicator.h.
#pragma once

#include <cstddef>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class BroadcastPull {
 public:
  BroadcastPull(Communicator& comm, void* data, size_t count, DataType dtype, int root);
  void run(Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
  std::byte* data_;
  size_t count_;
  DataType dtype_;
  int root_;
};

}  // namespace cohort::collectives
