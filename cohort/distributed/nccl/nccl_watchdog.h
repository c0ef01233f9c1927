// NcclWatchdog: the background check of one nccl group's ops, as PyTorch's
// ProcessGroupNCCL watchdog. An op enqueued on the group's stream is
// registered with its end event and deadline; every `interval` the thread
// drops the ops whose end event completed (in issue order: one stream) and,
// for the oldest one still running, asks the communicator for an
// asynchronous error and compares the clock with its deadline. A failure
// (PeerLost or Error from ncclCommGetAsyncError, TimeoutError past the
// deadline) names the group, rank, op and sequence number, is recorded
// first and then the communicator is aborted, so its kernels return and the
// peers' matching ops fail too; every op not yet seen complete, and every
// later one, fails with it. The flight recorder (collectives/
// flight_recorder.h) holds the group's last collectives with their state.
// Ownership: borrows the communicator and the device runtime, which must
// outlive stop(). Thread safety: every method from any thread; the thread
// never throws (a failure of its own checks fails the group).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "cohort/collectives/flight_recorder.h"
#include "cohort/core/device_runtime.h"
#include "cohort/distributed/nccl/nccl_comm.h"

namespace cohort::distributed {

struct NcclWatchdogOptions {
  std::string group;  // for messages
  int rank = 0;
  int device = 0;                          // the group's CUDA device: the thread's current one
  std::chrono::milliseconds interval{20};  // between rounds of checks
  size_t flight_recorder_entries = 2048;   // 0: none kept
};

class NcclWatchdog {
 public:
  NcclWatchdog(NcclComm& comm, DeviceRuntime& runtime, NcclWatchdogOptions options);
  ~NcclWatchdog();
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // An op about to be issued: `label` names it in errors ("all_reduce (seq
  // 3)", "send to rank 1"); `desc` goes to the flight recorder when
  // `collective`. Returns the op's id for watch() and check().
  uint64_t begin(const collectives::OpDesc& desc, bool collective, std::string label);
  // The op `id` was enqueued; `end` completes when it did on the device, and
  // it fails past now + timeout.
  void watch(uint64_t id, Event end, collectives::Duration timeout);
  // Throws the group's failure unless op `id` was seen complete before it.
  void check(uint64_t id) const;
  // Throws the group's failure, if there is one (before a new op).
  void check_healthy() const;
  // Whether op `id` was seen complete (false after a failure, for ops not
  // seen complete before it).
  bool completed(uint64_t id) const;
  // Fails the group with `error` (when it has not failed yet) and aborts the
  // communicator. Returns the group's failure (the first one).
  std::exception_ptr fail(std::exception_ptr error);
  bool failed() const;
  // Ops registered and not yet seen complete.
  size_t pending() const;
  // One round of checks (the thread runs it every interval).
  void poll();
  // Ends the thread (bounded: one round at most). Idempotent.
  void stop();

  std::string flight_record_json() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Op {
    uint64_t id = 0;
    std::string label;
    bool watched = false;  // end and deadline set
    Event end;
    Clock::time_point deadline;
    collectives::Duration timeout{0};
    bool recorded = false;  // has a flight recorder slot
    size_t slot = 0;
    uint64_t recorded_index = 0;  // entries started before it
  };
  void loop();
  // Sets the op's flight recorder entry to `state` unless newer ops reused its slot.
  void finish_entry(const Op& op, collectives::OpState state);

  NcclComm& comm_;
  DeviceRuntime& runtime_;
  NcclWatchdogOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;             // issue order (mu_)
  uint64_t next_id_ = 0;           // (mu_)
  uint64_t first_unfinished_ = 0;  // ids below it were seen complete (mu_)
  std::exception_ptr failure_;     // (mu_)
  bool stopping_ = false;          // (mu_)
  collectives::FlightRecorder recorder_;
  uint64_t recorded_ = 0;  // flight entries started (mu_)
  std::thread thread_;
};

}  // namespace cohort::distributed
