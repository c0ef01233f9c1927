#include "cohort/parallel/replica_pool.h"

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/base/parallel.h"

namespace cohort::parallel {
namespace {
thread_local int t_current_replica = -1;
}  // namespace

int ReplicaPool::current_replica() { return t_current_replica; }

ReplicaPool::ReplicaPool(std::vector<int> budgets) : budgets_(std::move(budgets)) {
  COHORT_CHECK(!budgets_.empty(), "ReplicaPool: needs at least one replica");
  errors_.resize(budgets_.size());
  for (size_t i = 1; i < budgets_.size(); ++i)
    threads_.emplace_back([this, i] { worker_loop(static_cast<int>(i)); });
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::run_task(int index) {
  try {
    ThreadBudgetGuard budget(budgets_[static_cast<size_t>(index)]);
    PrecisionScope precision(precision_);
    bool prev = GradMode::is_enabled();
    GradMode::set_enabled(grad_mode_);
    int prev_replica = t_current_replica;
    t_current_replica = index;
    try {
      (*fn_)(index);
    } catch (...) {
      GradMode::set_enabled(prev);
      t_current_replica = prev_replica;
      throw;
    }
    GradMode::set_enabled(prev);
    t_current_replica = prev_replica;
  } catch (...) {
    errors_[static_cast<size_t>(index)] = std::current_exception();
  }
}

void ReplicaPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= active_ + 1) continue;  // not needed this time
    }
    run_task(index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--remaining_ == 0) done_cv_.notify_one();
    }
  }
}

void ReplicaPool::run(int n, const std::function<void(int)>& fn) {
  COHORT_CHECK(n >= 1 && n <= max_replicas(), "ReplicaPool::run: {} tasks for {} replicas", n,
               max_replicas());
  std::lock_guard<std::mutex> run_lock(run_mu_);
  for (auto& e : errors_) e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    grad_mode_ = GradMode::is_enabled();
    precision_ = current_precision();
    active_ = n - 1;
    remaining_ = n - 1;
    if (n > 1) ++generation_;
  }
  if (n > 1) work_cv_.notify_all();
  run_task(0);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return remaining_ == 0; });
    fn_ = nullptr;
  }
  for (auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

}  // namespace cohort::parallel
