#include "cohort/base/parallel.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cohort/base/cpu.h"

namespace cohort {
namespace {

int initial_default() {
  if (const char* env = std::getenv("COHORT_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<int>& default_threads() {
  static std::atomic<int> n{initial_default()};
  return n;
}

thread_local int t_threads = 0;  // 0: use the process default
thread_local bool t_in_worker = false;

// How long a thread that ran out of work polls before it sleeps: a training
// step issues hundreds of short parallel_for calls back to back, and waking a
// sleeping thread through the kernel took 20-50 us per call on a 2-core VM
// (a bf16 GPT step was 10 % idle; polling for 200 us took its median over 8
// alternating runs from 121 to 112 ms). The bound keeps what an idle or
// oversubscribed process burns small.
constexpr auto kSpin = std::chrono::microseconds(200);

// Polls ready() for up to kSpin, not at all when this process runs on one
// CPU (the poller would take the time of the thread it waits for); the caller
// then sleeps on its condition if it is still false.
template <class Ready>
void spin_until(Ready ready) {
  static const bool may_spin = usable_cpus() >= 2;
  if (!may_spin) return;
  const auto until = std::chrono::steady_clock::now() + kSpin;
  do {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return;
      cpu_relax();
    }
  } while (std::chrono::steady_clock::now() < until);
}

// A fixed pool that grows on demand up to the largest budget requested. Tasks
// are plain closures; the caller of parallel_for waits on its own counter.
class Pool {
 public:
  static Pool& instance() {
    static bool registered = [] {
      // A forked child (spawn, DataLoader-free workers) inherits the pool object
      // but none of its threads, and maybe a mutex locked by one: it starts a
      // fresh pool and abandons the old one (destroying it would join threads
      // that do not exist in the child).
      pthread_atfork(nullptr, nullptr, [] {
        (void)slot().release();
        slot() = std::make_unique<Pool>();
      });
      return true;
    }();
    (void)registered;
    return *slot();
  }

  static std::unique_ptr<Pool>& slot() {
    static std::unique_ptr<Pool> pool = std::make_unique<Pool>();
    return pool;
  }

  void ensure_workers(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    while (static_cast<int>(workers_.size()) < n) {
      workers_.emplace_back([this] { run(); });
    }
  }

  void submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
      queued_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_one();
  }

  // Runs one queued task on the calling thread if there is one.
  bool try_run_one() {
    std::function<void()> task;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (tasks_.empty()) return false;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
    return true;
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  void run() {
    t_in_worker = true;
    for (;;) {
      std::function<void()> task;
      spin_until([this] { return queued_.load(std::memory_order_acquire) > 0; });
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (stop_ && tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
        queued_.fetch_sub(1, std::memory_order_relaxed);
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::atomic<int> queued_{0};  // tasks_.size(), read without the lock by spinning workers
  std::vector<std::thread> workers_;
  bool stop_ = false;
};

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

int num_threads() { return t_threads > 0 ? t_threads : default_threads().load(); }

void set_num_threads(int n) { t_threads = n > 0 ? n : 0; }

void set_default_num_threads(int n) { default_threads().store(n > 0 ? n : initial_default()); }

ThreadBudgetGuard::ThreadBudgetGuard(int n) : saved_(t_threads) { set_num_threads(n); }
ThreadBudgetGuard::~ThreadBudgetGuard() { t_threads = saved_; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  // Work already running on a pool worker stays on that worker: nested
  // parallelism would only oversubscribe the cores.
  int64_t chunks = t_in_worker ? 1 : std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  Pool& pool = Pool::instance();
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
