// NcclBackend: a process group's ops on CUDA tensors through NCCL, with
// PyTorch ProcessGroupNCCL's semantics. Each op is enqueued on the group's
// own stream (one per backend, from the device runtime's pool), ordered after
// the issuing stream's work by the event the ProcessGroup recorded there;
// the buffers' allocator blocks are marked used by that stream; the op's end
// event is what an async Work completes by, and what a blocking op makes the
// issuing stream wait for (the host does not wait). all_to_all,
// all_to_all_v (counts per peer, at the prefix sums), gather and scatter are
// grouped send/recv; barrier is an all_reduce of one element in a buffer the
// backend owns, which the host waits for. int8 is ncclInt8; bool goes as
// ncclUint8 with or/and as max/min (0/1 stay 0/1); NCCL has no bitwise
// reductions: band/bor/bxor are NotSupported, before anything is issued.
// NCCL does not check all_to_all_v's counts against the peers'.
//
// Errors: ops on host buffers are refused (InvalidArgument: move them with
// .cuda() or use the native backend). A watchdog thread (nccl_watchdog.h)
// checks each op's end event, ncclCommGetAsyncError and the op's time-out,
// aborts the communicator and fails the op with PeerLost / Error /
// TimeoutError naming group, rank, op and sequence number; from then on
// every op throws that failure at once, as abort(reason) makes them do.
// send/recv carry no tag on the wire (NCCL matches them in order).
// Sequence numbers count collectives from 0, one per collective run, as the
// ProcessGroup numbers them.
// Ownership: owns its communicator, stream, barrier buffer and watchdog;
// destruction stops the watchdog and aborts a communicator with ops still
// running (never waits for them). Thread safety: one op at a time (the
// group's); abort() and flight_record() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/distributed/backend.h"
#include "cohort/distributed/nccl/nccl_comm.h"
#include "cohort/distributed/nccl/nccl_watchdog.h"

namespace cohort::distributed {

// Makes the communicator of a (sub)group: create_nccl_comm's signature.
using NcclCommFactory = std::function<std::unique_ptr<NcclComm>(
    rendezvous::Store& store, int rank, int size, int device_index, const std::string& group,
    collectives::Duration timeout)>;

struct NcclBackendOptions {
  std::chrono::milliseconds watchdog_interval{20};
  // new_subgroup's communicators; empty: the real one (create_nccl_comm),
  // or NotSupported in a build without NCCL.
  NcclCommFactory make_comm;
};

class NcclBackend final : public Backend {
 public:
  // Over `comm` (its rank and size are the group's) on CUDA device
  // options.device_index (-1: the current device). NotSupported when the
  // build or the machine has no CUDA device.
  NcclBackend(std::unique_ptr<NcclComm> comm, const ProcessGroupOptions& options,
              NcclBackendOptions nccl = {});
  ~NcclBackend() override;

  // The backend of rank `rank` of `size` over the real communicator, met
  // through `store` (create_nccl_comm). NotSupported in a build without NCCL.
  static std::unique_ptr<NcclBackend> create(std::shared_ptr<rendezvous::Store> store, int rank,
                                             int size, const ProcessGroupOptions& options);

  BackendKind kind() const override { return BackendKind::kNccl; }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  bool ops_have_deadlines() const override { return true; }
  std::string transport_name(int /*peer*/) const override { return "nccl"; }
  std::string flight_record() const override { return watchdog_->flight_record_json(); }

  // Barrier only; every other op on host buffers throws InvalidArgument.
  void run(const OpArgs& a) override;
  bool runs_on_device(Device device) const override { return device.is_cuda(); }
  DeviceCompletion run_on_device(const OpArgs& a, const DeviceOpContext& ctx) override;

  std::unique_ptr<Backend> new_subgroup(const std::vector<int>& ranks,
                                        std::shared_ptr<rendezvous::Store> store,
                                        const ProcessGroupOptions& options) override;
  void abort(const std::string& reason) override;

  Device device() const { return device_; }
  // The group's stream (tests).
  const Stream& stream() const { return stream_; }

 private:
  // Enqueues `a` on stream_ after `ready` (when valid) and registers it with
  // the watchdog; returns the op's watchdog id and its end event.
  std::pair<uint64_t, Event> enqueue(const OpArgs& a, const Event& ready,
                                     const std::vector<void*>& blocks);
  // The communicator calls of `a` (a case per OpKind).
  void issue(const OpArgs& a);
  // Host waits for op `id` (ending with `end`): returns once it completed,
  // throws the watchdog's failure, bounded by `timeout` and a margin.
  void wait_host(uint64_t id, const Event& end, collectives::Duration timeout, const char* op);

  std::unique_ptr<NcclComm> comm_;
  std::string group_;
  Device device_;
  DeviceRuntime* runtime_;
  Stream stream_;
  void* barrier_buffer_ = nullptr;  // one float32 on device_, for barrier
  NcclBackendOptions nccl_;
  uint64_t seq_ = 0;  // the next collective's sequence number (the group's thread)
  std::shared_ptr<NcclWatchdog> watchdog_;
};

}  // namespace cohort::distributed
