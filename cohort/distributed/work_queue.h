// WorkQueue: the execution order of one ProcessGroup. Ops are pushed in issue
// order and run one at a time, in that order, on the queue's thread, or on a
// thread blocked in Work::wait when nothing is running (see work.h). A caller
// may also claim an idle queue and run one op itself (a blocking op on an idle
// group: no WorkState, no hand-off); ops pushed meanwhile wait for release().
// Internal to the distributed layer.
//
// Ownership: owns its thread; close() (or the destructor) lets the queued ops
// run, then joins it. Thread safety: every method may be called from any
// thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cohort/distributed/work.h"

namespace cohort::distributed::detail {

class WorkQueue {
 public:
  explicit WorkQueue(std::string name);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Appends an op; throws cohort::Error when the queue is closed. numbered:
  // sets work->seq to the next sequence number (see try_claim).
  void push(std::shared_ptr<WorkState> work, bool numbered = false);
  // Runs queued ops on the calling thread, in order, while none is running
  // and `target` is not done. Returns when target is done or another thread
  // runs an op (then target's completion is that thread's to signal).
  void help(const WorkState& target);
  // Claims the queue for an op the caller runs itself, when nothing is
  // queued or running (returns true; ops pushed meanwhile wait for
  // release()). Returns false when busy or closing. numbered: *seq gets the
  // next sequence number. Numbered pushes and claims share one counter,
  // taken in the same atomic step that orders them, so sequence numbers
  // follow execution order whichever threads issue the ops. Lock-free: one
  // compare-exchange here and one atomic subtraction in release().
  bool try_claim(bool numbered = false, uint64_t* seq = nullptr);
  void release();
  // Ops queued or running and not yet done (an op that has signalled its
  // waiters counts as finished even while its thread is still returning).
  size_t pending() const;
  // Refuses new ops, runs the queued ones, joins the thread. Idempotent.
  void close();

 private:
  void loop();
  bool claimed() const { return (busy_.load() & kClaimed) != 0; }
  uint64_t count() const { return busy_.load() & kCountMask; }
  // Runs the front op on this thread (mu_ held by lk; unlocked while it runs).
  void run_front(std::unique_lock<std::mutex>& lk);

  // busy_: bits 0-19 count the ops queued or running, bit 20 is set while a
  // caller holds a claim, bits 21-63 are the next sequence number (wraps
  // after 2^43 numbered ops).
  static constexpr uint64_t kCountMask = (uint64_t{1} << 20) - 1;
  static constexpr uint64_t kClaimed = uint64_t{1} << 20;
  static constexpr int kSeqShift = 21;
  static constexpr uint64_t kSeqOne = uint64_t{1} << kSeqShift;

  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<WorkState>> queue_;  // guarded by mu_
  bool running_ = false;                          // a queued op runs (mu_)
  std::shared_ptr<WorkState> current_;            // that op (mu_)
  // Count changed under mu_; try_claim() needs count and claim at 0.
  std::atomic<uint64_t> busy_{0};
  std::atomic<bool> closing_{false};  // set under mu_
  std::thread thread_;
};

}  // namespace cohort::distributed::detail
