// ThreadPool: the worker threads behind parallel_for (parallel.h), owned by
// the process runtime (runtime.h). Tasks are plain closures; whoever submits
// waits on its own counter. The pool grows on demand to the largest number of
// workers asked for and never shrinks; the process default intra-op budget
// (parallel.h's num_threads for threads without their own) lives here too.
//
// Waiting workers poll for kSpin before they sleep: a training step issues
// hundreds of short parallel_for calls back to back, and waking a sleeping
// thread through the kernel took 20-50 us per call on a 2-core VM (a bf16 GPT
// step was 10 % idle; polling for 200 us took its median over 8 alternating
// runs from 121 to 112 ms). The bound keeps what an idle or oversubscribed
// process burns small.
// Thread safety: every member may be called from any thread at once. The
// destructor joins the workers (after they drain the queue).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cohort/base/cpu.h"

namespace cohort {

struct ThreadPoolStats {
  int workers = 0;          // threads started so far
  int default_threads = 0;  // the process default budget
  uint64_t tasks = 0;       // tasks submitted so far
};

class ThreadPool {
 public:
  static constexpr auto kSpin = std::chrono::microseconds(200);

  // default_threads <= 0: the number of online CPUs.
  explicit ThreadPool(int default_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The budget of threads that have not set their own (>= 1).
  int default_threads() const { return default_threads_.load(std::memory_order_relaxed); }
  // n <= 0: the number of online CPUs.
  void set_default_threads(int n);

  void ensure_workers(int n);
  void submit(std::function<void()> task);
  // Runs one queued task on the calling thread if there is one.
  bool try_run_one();
  ThreadPoolStats stats() const;

  // Whether the calling thread is one of a pool's workers.
  static bool in_worker();

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::atomic<int> queued_{0};  // tasks_.size(), read without the lock by spinning workers
  std::vector<std::thread> workers_;
  uint64_t submitted_ = 0;  // under mu_
  bool stop_ = false;
  std::atomic<int> default_threads_;
};

// Polls ready() for up to ThreadPool::kSpin, not at all when this process runs
// on one CPU (the poller would take the time of the thread it waits for); the
// caller then sleeps on its condition if it is still false.
template <class Ready>
void spin_until(Ready ready) {
  static const bool may_spin = usable_cpus() >= 2;
  if (!may_spin) return;
  const auto until = std::chrono::steady_clock::now() + ThreadPool::kSpin;
  do {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return;
      cpu_relax();
    }
  } while (std::chrono::steady_clock::now() < until);
}

}  // namespace cohort
