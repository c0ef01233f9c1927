// fork / wait: inter-op parallelism in user code, as torch.jit.fork and
// torch.jit.wait. fork(fn) starts fn on a thread of its own and returns a
// Future; the caller goes on with other work and collects the result with
// wait():
//
//   // ops 1 and 2 depend only on x; op 3 on op 1; op 4 on ops 2 and 3
//   auto f = cohort::parallel::fork([&] { return op3(op1(x)); });
//   Tensor y2 = op2(x);                 // beside ops 1 and 3
//   Tensor y = op4(f.wait(), y2);
//   y.sum().backward();                 // the forked ops' backward runs beside op 2's
//
// The forked task inherits the caller's grad mode. Threads: the caller's
// intra-op budget B (num_threads()) is split while the task runs, so the two
// together never use more than B threads: the task gets branch_share(B, 2)
// and the calling thread the rest (at least 1 each) until wait() or the
// future's destruction restores its budget -- so wait on the thread that
// forked. ForkOptions::num_threads > 0 gives the task that budget instead and
// leaves the caller's alone (the caller then answers for the total). The autograd nodes it creates
// are marked as made by one of two concurrent branches, so that the backward engine may run their
// backward on a second thread (autograd/engine.h).
//
// Ownership: the Future owns the thread. Destroying it without wait() joins
// the thread (never leaks a running one) and drops the result or error. fn is
// moved into the thread; whatever it captures by reference must outlive the
// Future.
// Failure: an exception thrown by fn is rethrown by wait() as a
// cohort::Error saying it came from a forked task, with the original nested
// (std::rethrow_if_nested). A thread that cannot be started throws from fork.
// Thread safety: a Future is used by one thread (the one that waits).
#pragma once

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "cohort/autograd/node.h"
#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/core/tensor.h"
#include "cohort/parallel/inter_op/branch_context.h"

namespace cohort::parallel {

struct ForkOptions {
  // The forked task's intra-op budget; <= 0: half of the caller's, the caller
  // keeping the other half until wait() (see the header comment).
  int num_threads = 0;
};

namespace detail {
// Throws Error("fork/wait: the forked task failed: ...") with e nested.
[[noreturn]] void rethrow_from_forked_task(std::exception_ptr e);
[[noreturn]] void throw_waited_twice();
}  // namespace detail

template <typename T>
class Future;

// Starts fn() on a new thread; see the header comment.
template <typename F>
auto fork(F&& fn, const ForkOptions& options = {})
    -> Future<std::decay_t<std::invoke_result_t<std::decay_t<F>&>>>;

template <typename T>
class Future {
  static_assert(!std::is_void_v<T> && !std::is_reference_v<T>,
                "fork: the forked function must return a value");

 public:
  Future() = default;
  Future(Future&&) noexcept = default;
  // Joins the thread this future held before taking the other's.
  Future& operator=(Future&& other) noexcept {
    if (this != &other) {
      if (thread_.joinable()) thread_.join();
      thread_ = std::move(other.thread_);
      shared_ = std::move(other.shared_);
      caller_budget_ = std::move(other.caller_budget_);
    }
    return *this;
  }
  ~Future() = default;  // std::jthread joins

  // True until wait() has returned or thrown.
  bool valid() const { return shared_ != nullptr; }

  // Joins the task and returns its result, or rethrows its error (see the
  // header comment). A second call throws InvalidArgument.
  T wait() {
    if (!shared_) detail::throw_waited_twice();
    if (thread_.joinable()) thread_.join();
    caller_budget_.reset();
    std::shared_ptr<Shared> s = std::move(shared_);
    // The task's nodes came after the caller's so far; keep the caller's
    // later nodes after the task's (latest-first order in backward).
    autograd::advance_next_sequence_nr(s->sequence_end);
    if (s->error) detail::rethrow_from_forked_task(s->error);
    return std::move(*s->value);
  }

 private:
  struct Shared {
    std::optional<T> value;
    std::exception_ptr error;
    uint64_t sequence_end = 0;
  };

  template <typename F>
  friend auto fork(F&& fn, const ForkOptions& options)
      -> Future<std::decay_t<std::invoke_result_t<std::decay_t<F>&>>>;

  // The caller's share of the budget while the task runs; restores it.
  std::unique_ptr<ThreadBudgetGuard> caller_budget_;
  std::shared_ptr<Shared> shared_;
  std::jthread thread_;  // declared last: joined before shared_ and the budget go
};

using TensorFuture = Future<Tensor>;

template <typename F>
auto fork(F&& fn, const ForkOptions& options)
    -> Future<std::decay_t<std::invoke_result_t<std::decay_t<F>&>>> {
  using T = std::decay_t<std::invoke_result_t<std::decay_t<F>&>>;
  Future<T> f;
  f.shared_ = std::make_shared<typename Future<T>::Shared>();
  const int budget = num_threads();
  const int task_threads = options.num_threads > 0 ? options.num_threads : branch_share(budget, 2);
  const BranchContext context = BranchContext::capture(2, task_threads);
  if (options.num_threads <= 0) {
    f.caller_budget_ = std::make_unique<ThreadBudgetGuard>(std::max(1, budget - task_threads));
  }
  f.thread_ = std::jthread([s = f.shared_, context, fn = std::forward<F>(fn)]() mutable {
    {
      BranchScope scope(context);
      try {
        s->value.emplace(fn());
      } catch (...) {
        s->error = std::current_exception();
      }
      s->sequence_end = autograd::next_sequence_nr();
    }
  });
  return f;
}

}  // namespace cohort::parallel
