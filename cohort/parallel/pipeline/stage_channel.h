// StageChannel: activations and their gradients between pipeline ranks over a
// ProcessGroup's send/recv. Each message is a fixed header (16 int64: magic,
// step, kind, micro-batch, receiving stage, dtype, ndim, up to 8 dims, sender)
// followed by the payload, so micro-batches never mix and shapes may vary
// from one message to the next (a smaller last micro-batch).
//
// Sends are queued asynchronously (the channel keeps header and payload alive
// until their Work completed); receives block. The group runs its ops in issue
// order, so the caller's order of sends and receives is the wire order.
// Failure: a receive whose header differs from what the caller expects (other
// step, kind, micro-batch, stage, or a gradient whose shape is not the
// output's) throws Error naming both ranks, the micro-batch and both values,
// after taking the payload off the wire (a header that cannot describe one,
// e.g. a bad magic, throws at once); the group's errors (a lost peer, a timeout) propagate from
// recv() and wait_sends(). Thread safety: one thread uses a channel.
#pragma once

#include <cstdint>
#include <vector>

#include "cohort/core/tensor.h"
#include "cohort/distributed/process_group.h"

namespace cohort::parallel::pipeline {

// What a message carries.
struct MessageId {
  bool gradient = false;  // false: an activation (forward), true: its gradient
  int mb = 0;
  int stage = 0;  // the receiving stage (global stage index)
  int64_t step = 0;
};

class StageChannel {
 public:
  explicit StageChannel(distributed::ProcessGroup& group) : group_(&group) {}
  // Where received payloads are made (the stages' device; the CPU by
  // default). Headers travel where the group carries them (exchange_device).
  void set_device(Device device) { device_ = device; }

  // Queues `t` (made contiguous) for `peer`.
  void send(const Tensor& t, const MessageId& id, int peer);
  // Blocks for the next message from `peer`, which must be `expected`; with
  // `expected_shape` set its shape must be that too.
  Tensor recv(const MessageId& expected, int peer, const Shape* expected_shape = nullptr);
  // Waits for every queued send; drops the ones done.
  void wait_sends();
  // Forgets queued sends without waiting (after a failure).
  void drop_sends() { pending_.clear(); }
  // Seconds spent blocked in recv / wait_sends since the last reset.
  double recv_seconds() const { return recv_seconds_; }
  double send_wait_seconds() const { return send_wait_seconds_; }
  void reset_timers() { recv_seconds_ = send_wait_seconds_ = 0; }

 private:
  struct Pending {
    distributed::Work work;
    Tensor keep;
  };
  distributed::ProcessGroup* group_;
  Device device_ = kCPU;
  std::vector<Pending> pending_;
  double recv_seconds_ = 0;
  double send_wait_seconds_ = 0;
};

}  // namespace cohort::parallel::pipeline
