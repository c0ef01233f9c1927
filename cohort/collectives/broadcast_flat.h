// BroadcastFlat: the root sends its buffer to every other rank directly (one hop; for small
// messages).
//
// Set up once with the buffers, run() any number of times (each run is one
// collective with a new sequence number). Ownership: borrows the
// communicator and the buffers, which must outlive the object. Thread safety:
// one run at a time per communicator. Failures: see communicator.h.
#pragma once

#include <cstddef>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class BroadcastFlat {
 public:
  BroadcastFlat(Communicator& comm, void* data, size_t count, DataType dtype, int root);
  void run(Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
  std::byte* data_;
  size_t count_;
  DataType dtype_;
  int root_;
};

}  // namespace cohort::collectives
