#include "cohort/base/thread_pool.h"

#include <algorithm>

namespace cohort {
namespace {

thread_local bool t_in_worker = false;

int online_cpus() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

ThreadPool::ThreadPool(int default_threads)
    : default_threads_(default_threads > 0 ? default_threads : online_cpus()) {}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::set_default_threads(int n) {
  default_threads_.store(n > 0 ? n : online_cpus(), std::memory_order_relaxed);
}

bool ThreadPool::in_worker() { return t_in_worker; }

void ThreadPool::ensure_workers(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  while (static_cast<int>(workers_.size()) < n) {
    workers_.emplace_back([this] { run(); });
  }
}

void ThreadPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    ++submitted_;
    queued_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_one();
}

bool ThreadPool::try_run_one() {
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

ThreadPoolStats ThreadPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {static_cast<int>(workers_.size()), default_threads(), submitted_};
}

void ThreadPool::run() {
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

}  // namespace cohort
