// BarrierDirect: every rank sends an op header to every other rank and waits for all of theirs (one
// hop; the headers also check that all ranks called barrier).
//
// Set up once with the buffers, run() any number of times (each run is one
// collective with a new sequence number). Ownership: borrows the
// communicator and the buffers, which must outlive the object. Thread safety:
// one run at a time per communicator. Failures: see communicator.h.
#pragma once

#include <cstddef>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class BarrierDirect {
 public:
  explicit BarrierDirect(Communicator& comm);
  void run(Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
};

}  // namespace cohort::collectives
