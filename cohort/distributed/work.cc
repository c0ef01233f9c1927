#include "cohort/distributed/work.h"

#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/distributed/work_queue.h"

namespace cohort::distributed {
namespace detail {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string describe_op(const char* op, const std::string& group, int rank, bool collective,
                        uint64_t seq) {
  if (collective) return fmt::format("{} (group '{}', rank {}, seq {})", op, group, rank, seq);
  return fmt::format("{} (group '{}', rank {})", op, group, rank);
}

std::string WorkState::describe() const {
  return describe_op(op, group ? *group : std::string(), rank, collective, seq);
}

void WorkState::run() noexcept {
  started_ns.store(now_ns(), std::memory_order_release);
  std::exception_ptr failure;
  try {
    body();
  } catch (...) {
    failure = with_context(std::current_exception(), describe());
  }
  // Release captured buffers and tensors before anyone sees the op as done.
  body = nullptr;
  finished_ns.store(now_ns(), std::memory_order_release);
  complete(failure);
}

void WorkState::complete(std::exception_ptr failure) noexcept {
  std::vector<std::function<void()>> run_after;
  {
    std::lock_guard<std::mutex> lk(mu);
    error = failure;
    done.store(true, std::memory_order_release);
    run_after.swap(callbacks);
  }
  cv.notify_all();
  for (auto& f : run_after) f();
}

std::exception_ptr with_context(std::exception_ptr error, const std::string& prefix) {
  return with_message(std::move(error), prefix + ": ");
}

}  // namespace detail

const detail::WorkState& Work::state() const {
  if (!state_) throw InvalidArgument("Work: this Work is undefined (default-constructed)");
  return *state_;
}

void Work::wait(Duration timeout) const {
  const detail::WorkState& s = state();
  if (!s.done.load(std::memory_order_acquire)) {
    bool use_default = timeout == kUseDefaultTimeout;
    if (use_default && s.may_run_inline) {
      if (auto q = s.queue.lock()) q->help(s);
    }
    auto call = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lk(s.mu);
    for (;;) {
      auto deadline = call + timeout;
      if (use_default) {
        // Counted from the op's start, so ops queued ahead do not use it up.
        int64_t started = s.started_ns.load(std::memory_order_acquire);
        auto from = started == 0
                        ? std::chrono::steady_clock::now()
                        : std::chrono::steady_clock::time_point(std::chrono::nanoseconds(started));
        deadline = std::max(from, call) + s.wait_limit;
      }
      if (s.cv.wait_until(lk, deadline, [&] { return s.done.load(); })) break;
      if (!use_default || s.started_ns.load() != 0) {
        if (std::chrono::steady_clock::now() >= deadline) {
          Duration limit = use_default ? s.wait_limit : timeout;
          throw TimeoutError(fmt::format(
              "{}: Work::wait timed out after {} ms; the op is {}", s.describe(), limit.count(),
              s.started_ns.load() != 0 ? "still running" : "still queued behind earlier ops"));
        }
      }
    }
  }
  if (s.error) std::rethrow_exception(s.error);
  if (s.device_end && s.device_end->end.valid()) {
    if (s.device_end->check) s.device_end->check();
    const Event& e = s.device_end->end;
    device_runtime(e.device, s.op).wait(current_stream(e.device), e);
  }
}

bool Work::is_completed() const {
  const detail::WorkState& s = state();
  if (!s.done.load(std::memory_order_acquire)) return false;
  if (!s.device_end || !s.device_end->end.valid()) return true;
  const Event& e = s.device_end->end;
  return device_runtime(e.device, s.op).query(e);
}

bool Work::is_success() const {
  const detail::WorkState& s = state();
  if (!s.done.load(std::memory_order_acquire)) return false;
  return !s.error;
}

std::exception_ptr Work::exception() const {
  const detail::WorkState& s = state();
  if (!s.done.load(std::memory_order_acquire)) return nullptr;
  return s.error;
}

const char* Work::op() const { return state().op; }
uint64_t Work::sequence() const { return state().collective ? state().seq : 0; }
int Work::source_rank() const {
  const detail::WorkState& s = state();
  // done (acquire) orders the body's write of *source before this read.
  if (!s.source || !s.done.load(std::memory_order_acquire) || s.error) return -1;
  return *s.source;
}
std::string Work::describe() const { return state().describe(); }

void Work::then(std::function<void()> callback) const {
  const detail::WorkState& s = state();
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (!s.done.load(std::memory_order_acquire)) {
      s.callbacks.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

namespace {
std::optional<std::chrono::steady_clock::time_point> time_of(const std::atomic<int64_t>& ns) {
  const int64_t v = ns.load(std::memory_order_acquire);
  if (v == 0) return std::nullopt;
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(v));
}
}  // namespace

std::optional<std::chrono::steady_clock::time_point> Work::started_at() const {
  return time_of(state().started_ns);
}
std::optional<std::chrono::steady_clock::time_point> Work::finished_at() const {
  return time_of(state().finished_ns);
}

Work Work::completed(const char* op, std::exception_ptr error) {
  auto s = std::make_shared<detail::WorkState>();
  s->op = op;
  s->collective = false;
  s->error = error;
  s->done.store(true);
  return Work(std::move(s));
}

}  // namespace cohort::distributed
