// Future: the result of an asynchronous remote call (PyTorch's
// torch.futures.Future for RPC). Completes exactly once, with a Message or
// with an exception; every future the agent hands out carries a deadline and
// is failed with cohort::TimeoutError when it passes, so wait() never blocks
// forever.
//
// Errors a call's future carries (each names the callee worker, the function
// and the cause):
//   cohort::TimeoutError  no reply before the call's timeout;
//   cohort::PeerLost      the callee died or its connection dropped (reported
//                         as soon as the socket closes, long before the timeout);
//   cohort::InvalidArgument / Error  the handler threw (same class as it threw
//                         when it was a cohort error, else Error), or the
//                         function is unknown on the callee.
//
// Ownership: copies share one state. Thread safety: all members may be called
// from any thread; then() callbacks run on the thread that completes the
// future (the agent's I/O thread) or, when already complete, on the caller's
// thread; they must be quick and must not block (no rpc_sync inside).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cohort/rpc/message.h"

namespace cohort::rpc {

using Clock = std::chrono::steady_clock;
using Duration = Clock::duration;

namespace detail {
struct FutureState;
}  // namespace detail

class Future {
 public:
  // An invalid future; calling anything but valid() on it throws.
  Future() = default;
  explicit Future(std::shared_ptr<detail::FutureState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // True once completed (value or error).
  bool done() const;
  // Blocks until completion; returns the value or rethrows the error.
  // The agent fails the future at its deadline, so this terminates.
  Message wait() const;
  // Blocks up to d; true when completed (then wait() returns at once).
  bool wait_for(Duration d) const;
  // The error, if completed with one (nullptr otherwise or while pending).
  std::exception_ptr error() const;
  // Runs cb(*this) once the future completes (see thread notes above).
  void then(std::function<void(const Future&)> cb) const;

  // For implementers (the agent, tests): complete the future; only the first
  // completion counts; returns whether this call completed it.
  bool set_value(Message m) const;
  bool set_error(std::exception_ptr e) const;
  // A new pending future.
  static Future make();

 private:
  std::shared_ptr<detail::FutureState> state_;
};

}  // namespace cohort::rpc
