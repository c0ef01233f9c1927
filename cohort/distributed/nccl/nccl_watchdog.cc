#include "cohort/distributed/nccl/nccl_watchdog.h"

#include <fmt/format.h>

#include <utility>

#include "cohort/base/error.h"

namespace cohort::distributed {

NcclWatchdog::NcclWatchdog(NcclComm& comm, DeviceRuntime& runtime, NcclWatchdogOptions options)
    : comm_(comm),
      runtime_(runtime),
      options_(std::move(options)),
      recorder_(options_.flight_recorder_entries) {
  thread_ = std::thread([this] { loop(); });
}

NcclWatchdog::~NcclWatchdog() { stop(); }

void NcclWatchdog::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t NcclWatchdog::begin(const collectives::OpDesc& desc, bool collective, std::string label) {
  std::lock_guard<std::mutex> lk(mu_);
  Op op;
  op.id = next_id_++;
  op.label = std::move(label);
  if (collective && recorder_.capacity() > 0) {
    op.recorded = true;
    op.slot = recorder_.start(desc);
    op.recorded_index = recorded_++;
  }
  ops_.push_back(std::move(op));
  return ops_.back().id;
}

void NcclWatchdog::watch(uint64_t id, Event end, collectives::Duration timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  for (Op& op : ops_) {
    if (op.id != id) continue;
    op.end = std::move(end);
    op.timeout = timeout;
    op.deadline = Clock::now() + timeout;
    op.watched = true;
    return;
  }
  // Not there: the group failed meanwhile and dropped it; check() reports that.
}

void NcclWatchdog::check(uint64_t id) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (failure_ && id >= first_unfinished_) std::rethrow_exception(failure_);
}

void NcclWatchdog::check_healthy() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (failure_) std::rethrow_exception(failure_);
}

bool NcclWatchdog::completed(uint64_t id) const {
  std::lock_guard<std::mutex> lk(mu_);
  return id < first_unfinished_;
}

bool NcclWatchdog::failed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failure_ != nullptr;
}

size_t NcclWatchdog::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return ops_.size();
}

std::exception_ptr NcclWatchdog::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failure_) return failure_;
    // Recorded before the abort: a waiter that then sees an end event
    // complete (an aborted kernel returns) also sees the failure.
    failure_ = std::move(error);
    first_unfinished_ = ops_.empty() ? next_id_ : ops_.front().id;
    for (const Op& op : ops_) finish_entry(op, collectives::OpState::kFailed);
    ops_.clear();
  }
  cv_.notify_all();
  comm_.abort();
  std::lock_guard<std::mutex> lk(mu_);
  return failure_;
}

void NcclWatchdog::finish_entry(const Op& op, collectives::OpState state) {
  // A slot is reused after `capacity` newer entries; leave the newer one alone.
  if (op.recorded && recorded_ - op.recorded_index <= recorder_.capacity()) {
    recorder_.finish(op.slot, state);
  }
}

void NcclWatchdog::poll() {
  std::string label;
  std::string expired;
  collectives::Duration expired_after{0};
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failure_) return;
    while (!ops_.empty() && ops_.front().watched && runtime_.query(ops_.front().end)) {
      finish_entry(ops_.front(), collectives::OpState::kCompleted);
      ops_.pop_front();
    }
    first_unfinished_ = ops_.empty() ? next_id_ : ops_.front().id;
    const Clock::time_point now = Clock::now();
    for (const Op& op : ops_) {
      if (!op.watched) continue;  // still being issued (a bounded call)
      if (label.empty()) label = op.label;
      if (now >= op.deadline) {
        expired = op.label;
        expired_after = op.timeout;
        break;
      }
    }
  }
  if (label.empty()) return;  // nothing on the device
  NcclAsyncError e = comm_.async_error();
  if (!e.ok) {
    std::string msg = fmt::format(
        "nccl: rank {} of group '{}': {} failed: {}; aborted the "
        "communicator",
        options_.rank, options_.group, label, e.message);
    fail(e.remote ? std::make_exception_ptr(PeerLost(msg)) : std::make_exception_ptr(Error(msg)));
    return;
  }
  if (!expired.empty()) {
    fail(std::make_exception_ptr(TimeoutError(
        fmt::format("nccl: {} on group '{}' (rank {}) timed out after {} ms; aborted the "
                    "communicator",
                    expired, options_.group, options_.rank, expired_after.count()))));
  }
}

void NcclWatchdog::loop() {
  try {
    // Before any device call: a thread's first one otherwise creates a
    // context on GPU 0, about 0.5 GB of it, on every rank.
    runtime_.set_device(options_.device);
  } catch (...) {
    fail(with_message(std::current_exception(),
                      fmt::format("nccl: rank {} of group '{}': watchdog: selecting cuda:{}: ",
                                  options_.rank, options_.group, options_.device)));
  }
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, options_.interval, [&] { return stopping_; });
    if (stopping_) break;
    lk.unlock();
    try {
      poll();
    } catch (...) {
      // A failing device query or communicator call: the group cannot be
      // trusted any more.
      fail(with_message(
          std::current_exception(),
          fmt::format("nccl: rank {} of group '{}': watchdog: ", options_.rank, options_.group)));
    }
    lk.lock();
  }
}

std::string NcclWatchdog::flight_record_json() const {
  return recorder_.to_json(options_.rank, options_.group);
}

}  // namespace cohort::distributed
