#include "cohort/base/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "cohort/base/runtime.h"

namespace cohort {
namespace {

thread_local int t_threads = 0;  // 0: use the process default

struct CallState {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> remaining{0};  // changed under mu, polled without it
  std::exception_ptr error;
};

void run_chunk(CallState& st, const std::function<void(int64_t, int64_t)>& fn, int64_t b,
               int64_t e) {
  std::exception_ptr err;
  try {
    fn(b, e);
  } catch (...) {
    err = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(st.mu);
  if (err && !st.error) st.error = err;
  if (st.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) st.cv.notify_all();
}

}  // namespace

int num_threads() {
  return t_threads > 0 ? t_threads : Runtime::process().thread_pool().default_threads();
}

void set_num_threads(int n) { t_threads = n > 0 ? n : 0; }

void set_default_num_threads(int n) { Runtime::process().thread_pool().set_default_threads(n); }

ThreadBudgetGuard::ThreadBudgetGuard(int n) : saved_(t_threads) { set_num_threads(n); }
ThreadBudgetGuard::~ThreadBudgetGuard() { t_threads = saved_; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  // Work already running on a pool worker stays on that worker: nested
  // parallelism would only oversubscribe the cores.
  int64_t chunks =
      ThreadPool::in_worker() ? 1 : std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  ThreadPool& pool = Runtime::process().thread_pool();
  pool.ensure_workers(static_cast<int>(chunks) - 1);
  CallState st;
  st.remaining = static_cast<int>(chunks);
  const int64_t step = n / chunks, extra = n % chunks;
  int64_t b0 = begin, e0 = begin + step + (extra > 0 ? 1 : 0);
  int64_t b = e0;
  for (int64_t c = 1; c < chunks; ++c) {
    int64_t e = b + step + (c < extra ? 1 : 0);
    pool.submit([&st, &fn, b, e] { run_chunk(st, fn, b, e); });
    b = e;
  }
  run_chunk(st, fn, b0, e0);
  // Help drain the queue (our chunks or others') rather than sleep while work waits.
  auto done = [&st] { return st.remaining.load(std::memory_order_acquire) == 0; };
  while (!done() && pool.try_run_one()) {
  }
  spin_until(done);
  // Under the lock also when the poll saw the end: the last run_chunk may still
  // hold st.mu, and st dies with this frame.
  std::unique_lock<std::mutex> lock(st.mu);
  st.cv.wait(lock, done);
  if (st.error) std::rethrow_exception(st.error);
}

}  // namespace cohort
