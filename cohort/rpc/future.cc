#include "cohort/rpc/future.h"

#include "cohort/base/error.h"

namespace cohort::rpc {

namespace detail {

struct FutureState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Message value;
  std::exception_ptr error;
  std::vector<std::function<void(const Future&)>> callbacks;
};

}  // namespace detail

namespace {

detail::FutureState& checked(const std::shared_ptr<detail::FutureState>& s) {
  COHORT_CHECK(s != nullptr, "rpc: use of an invalid (default-constructed) Future");
  return *s;
}

}  // namespace

Future Future::make() { return Future(std::make_shared<detail::FutureState>()); }

bool Future::done() const {
  auto& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.done;
}

Message Future::wait() const {
  auto& s = checked(state_);
  std::unique_lock<std::mutex> lock(s.mu);
  // No deadline here: the agent fails every future it hands out at its
  // deadline or at shutdown, so this wait ends.
  s.cv.wait(lock, [&] { return s.done; });
  if (s.error) std::rethrow_exception(s.error);
  return s.value;
}

bool Future::wait_for(Duration d) const {
  auto& s = checked(state_);
  std::unique_lock<std::mutex> lock(s.mu);
  return s.cv.wait_for(lock, d, [&] { return s.done; });
}

std::exception_ptr Future::error() const {
  auto& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.done ? s.error : nullptr;
}

void Future::then(std::function<void(const Future&)> cb) const {
  auto& s = checked(state_);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.done) {
      s.callbacks.push_back(std::move(cb));
      return;
    }
  }
  cb(*this);
}

namespace {

bool complete(const Future& f, detail::FutureState& s, Message* value, std::exception_ptr error) {
  std::vector<std::function<void(const Future&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.done) return false;
    s.done = true;
    if (value != nullptr) s.value = std::move(*value);
    s.error = std::move(error);
    callbacks.swap(s.callbacks);
  }
  s.cv.notify_all();
  for (auto& cb : callbacks) {
    // Callbacks run on the completing thread (often the I/O thread), which
    // must survive them.
    try {
      cb(f);
    } catch (...) {
    }
  }
  return true;
}

}  // namespace

bool Future::set_value(Message m) const { return complete(*this, checked(state_), &m, nullptr); }

bool Future::set_error(std::exception_ptr e) const {
  return complete(*this, checked(state_), nullptr, std::move(e));
}

}  // namespace cohort::rpc
