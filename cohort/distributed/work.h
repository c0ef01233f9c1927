// Work: the handle of one asynchronous ProcessGroup operation (PyTorch's
// c10d::Work). A collective called with the async_op tag returns one at once;
// the op runs later on the group's execution thread, after every op issued on
// the group before it.
//
//   Work w = pg->all_reduce(grad, {}, async_op);   // returns immediately
//   ...                                            // overlap other work
//   w.wait();                                      // rethrows the op's exception, if any
//
// wait() on an op that has not started yet, with nothing running on the
// group, runs the queued ops up to it on the calling thread instead of
// handing them to the group's thread (same order, same result; it saves two
// thread hand-offs, which is most of a small op's latency).
//
// Failure: a failed op's exception (cohort::PeerLost naming the lost rank,
// cohort::InvalidArgument for a mismatch, cohort::TimeoutError, ...) is kept
// with its type; its message starts with the op, the group, this rank and the
// op's sequence number. wait() rethrows it, exception() returns it. A wait
// that runs past its own timeout throws TimeoutError and leaves the op
// pending (the op's own deadline still ends it).
//
// Ownership: a Work shares its state with the group's queue; copies refer to
// the same op. Keep the op's buffers alive and untouched until it completed
// (tensor overloads keep their tensors alive themselves).
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cohort/core/device_runtime.h"
#include "cohort/distributed/options.h"

namespace cohort::distributed {

namespace detail {

class WorkQueue;

// The device side of a queued device op, filled in by its body.
struct DeviceEnd {
  Event end;
  std::function<void()> check;  // throws the backend's failure of the op, if any
};

// State shared by a Work, its copies and the queue that runs it.
struct WorkState {
  const char* op = "";                       // "all_reduce", "send", ... (a literal)
  std::shared_ptr<const std::string> group;  // the group's name
  int rank = 0;                              // this process's rank in the group
  bool collective = true;
  uint64_t seq = 0;  // collective sequence number in the group (collectives only)
  // How long a default wait() waits after the op started.
  Duration wait_limit = std::chrono::seconds(300);
  // Whether wait() may run the op on its own thread (the backend's ops end by
  // their own deadline, so the default wait stays bounded).
  bool may_run_inline = true;
  std::function<void()> body;  // released once it ran
  std::weak_ptr<WorkQueue> queue;

  std::atomic<bool> done{false};
  std::atomic<int64_t> started_ns{0};   // steady_clock time the op started, 0 before
  std::atomic<int64_t> finished_ns{0};  // steady_clock time it ended (run() only), 0 before
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::exception_ptr error;
  // recv_any: where its body writes the sender's rank (before `done`); null
  // for other ops.
  std::shared_ptr<const int> source;
  // Ops on device buffers through a backend that enqueues them (nccl): set by
  // the op's body before `done`; the host part is done once enqueued, and the
  // op's end on the device is this event (see Work::wait).
  std::shared_ptr<struct DeviceEnd> device_end;
  // Run once `done` is set (mu): see Work::then.
  mutable std::vector<std::function<void()>> callbacks;

  // "all_reduce (group 'default', rank 0, seq 3)"
  std::string describe() const;
  // Runs body, records its failure with this op's context, wakes waiters,
  // then runs the callbacks.
  void run() noexcept;
  // Marks the op done with `failure` (null: success) and runs the callbacks.
  void complete(std::exception_ptr failure) noexcept;
};

// An op's context in messages: "all_reduce (group 'default', rank 0, seq 3)"
// ("send (group 'default', rank 0)" for point-to-point ops).
std::string describe_op(const char* op, const std::string& group, int rank, bool collective,
                        uint64_t seq);

// Re-creates the exception in `error` with `prefix` before its message,
// keeping its cohort type (PeerLost, TimeoutError, InvalidArgument, ...).
std::exception_ptr with_context(std::exception_ptr error, const std::string& prefix);

}  // namespace detail

class Work {
 public:
  Work() = default;  // undefined; every method but defined() throws
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  bool defined() const { return state_ != nullptr; }
  // Blocks until the op completed and rethrows its exception. For an op on
  // device buffers that the backend only enqueued (nccl), "completed" is on
  // the host side: wait() then makes the calling thread's current stream wait
  // for the op's end on the device without blocking the host (PyTorch's
  // ProcessGroupNCCL semantics), after rethrowing any failure the backend's
  // watchdog found. timeout:
  // kUseDefaultTimeout = the group's timeout, counted from when the op
  // started (ops queued ahead of it do not use it up); otherwise counted from
  // this call. TimeoutError when it passes (the op stays pending).
  void wait(Duration timeout = kUseDefaultTimeout) const;
  // Never blocks. Device ops: also ended on the device.
  bool is_completed() const;
  // Completed without an error.
  bool is_success() const;
  // The failed op's exception; null while pending or after success.
  std::exception_ptr exception() const;
  const char* op() const;
  // Collective sequence number in the group (0 for send/recv).
  uint64_t sequence() const;
  // recv_any: the group rank the message came from, once the op completed
  // successfully (PyTorch's Work::sourceRank); -1 before that, after a
  // failure, and for every other op.
  int source_rank() const;
  // When the op started and ended running (steady clock), for traces; nullopt
  // before that, and for ops run synchronously by a blocking call.
  std::optional<std::chrono::steady_clock::time_point> started_at() const;
  std::optional<std::chrono::steady_clock::time_point> finished_at() const;
  std::string describe() const;
  // Runs `callback` once the op completed on the host side (success or
  // failure; read them with exception()): on the thread that ran the op,
  // after its waiters were woken, or here and now when it already completed.
  // What PyTorch's Work::getFuture is built on. The callback must not throw
  // (it is called noexcept) nor wait for a later op of this group on the
  // group's thread. Callbacks run in the order they were added.
  void then(std::function<void()> callback) const;

  // A Work that is already complete (with `error` when non-null); for
  // callers that finish an op synchronously. op: a string literal.
  static Work completed(const char* op, std::exception_ptr error = nullptr);

 private:
  const detail::WorkState& state() const;
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace cohort::distributed
