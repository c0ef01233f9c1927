// ReplicaPool: a fixed set of threads that run one task per replica at once
// (DataParallel's forward and backward). run(n, fn) calls fn(0) on the
// calling thread and fn(1..n-1) on the pool's threads, returns when all are
// done and rethrows the first exception (by replica index). Each task runs
// with the intra-op thread budget given for its replica (ThreadBudgetGuard)
// and with the caller's grad mode and precision policy (autograd/precision.h),
// so replicas share the cores instead of oversubscribing them and compute as
// the caller would.
//
// The waits have no deadline: they wait for computation that this process is
// doing itself, which always ends (a task that throws ends too).
// Ownership: owns its threads (joined by the destructor). Thread safety: run
// may be called from any thread; calls are serialised.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cohort/autograd/precision.h"

namespace cohort::parallel {

class ReplicaPool {
 public:
  // `threads`: intra-op budget of each replica (size = max replicas).
  explicit ReplicaPool(std::vector<int> budgets);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int max_replicas() const { return static_cast<int>(budgets_.size()); }
  int budget(int replica) const { return budgets_[static_cast<size_t>(replica)]; }
  // Runs fn(i) for i in [0, n), n <= max_replicas(), fn(0) on this thread.
  void run(int n, const std::function<void(int)>& fn);
  // Inside a task: its replica index; -1 on threads not running a task.
  static int current_replica();

 private:
  void worker_loop(int index);
  void run_task(int index);

  std::vector<int> budgets_;
  std::vector<std::thread> threads_;
  std::mutex run_mu_;  // serialises run()
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  int active_ = 0;     // tasks handed to workers in this generation
  int remaining_ = 0;  // of those, not finished
  bool grad_mode_ = true;
  PrecisionPolicy precision_;  // the caller's, for every task
  bool stop_ = false;
  const std::function<void(int)>* fn_ = nullptr;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace cohort::parallel
