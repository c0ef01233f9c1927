// Intra-op parallelism: parallel_for splits a range over the runtime's pool of
// worker threads (runtime.h); the calling thread takes a share too, so a call
// never waits on a pool that is busy elsewhere without making progress itself.
//
// The thread budget is per calling thread (set_num_threads affects the calling
// thread and threads that have not set their own), so DataParallel replicas
// running on threads can each be bounded to their share of the cores.
// Thread safe: any number of threads may call parallel_for at once.
// Exceptions thrown by the body are rethrown in the caller (the first one).
#pragma once

#include <cstdint>
#include <functional>

namespace cohort {

// Threads the calling thread may use for one op (>= 1). Defaults to the process
// default (RuntimeOptions::num_threads), the online CPUs unless the program's
// edge sets it (COHORT_NUM_THREADS; docs/configuration.md); never the library.
int num_threads();

// Sets the calling thread's budget. n <= 0 resets it to the process default.
void set_num_threads(int n);

// Sets the process default budget (threads without their own use it); edge only.
void set_default_num_threads(int n);

// RAII: sets the calling thread's budget for a scope and restores it.
class ThreadBudgetGuard {
 public:
  explicit ThreadBudgetGuard(int n);
  ~ThreadBudgetGuard();
  ThreadBudgetGuard(const ThreadBudgetGuard&) = delete;
  ThreadBudgetGuard& operator=(const ThreadBudgetGuard&) = delete;

 private:
  int saved_;
};

// Calls fn(chunk_begin, chunk_end) over [begin, end) in at most num_threads()
// chunks of at least `grain` elements each. Runs inline when one chunk suffices.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace cohort
