// PointToPoint: tagged send and recv between two ranks, and recv from any
// peer. A message is the op header (tag, count, dtype, per-pair message
// number) and the payload; the receiver checks the header against what it
// asked for before writing a byte.
//
// Ownership: borrows the communicator and buffers. Thread safety: one op at a
// time per communicator. Failures: see communicator.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

class PointToPoint {
 public:
  explicit PointToPoint(Communicator& comm) : comm_(comm) {}
  void send(const void* data, size_t count, DataType dtype, int dst, uint32_t tag,
            Duration timeout = kUseDefaultTimeout);
  void recv(void* data, size_t count, DataType dtype, int src, uint32_t tag,
            Duration timeout = kUseDefaultTimeout);
  // From whichever peer's send with `tag` arrives first (communicator.h has
  // the rules); returns that peer. One op listening to every peer's channel.
  int recv_any(void* data, size_t count, DataType dtype, uint32_t tag,
               Duration timeout = kUseDefaultTimeout);

 private:
  Communicator& comm_;
};

}  // namespace cohort::collectives
