#include "cohort/distributed/work_queue.h"

#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/collectives/engine.h"

namespace cohort::distributed::detail {

WorkQueue::WorkQueue(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] {
    collectives::set_background_thread(true);
    loop();
  });
}

WorkQueue::~WorkQueue() { close(); }

void WorkQueue::push(std::shared_ptr<WorkState> work, bool numbered) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closing_) {
      throw Error(fmt::format("{}: process group '{}' was destroyed", work->op, name_));
    }
    if (count() == kCountMask) {
      throw Error(fmt::format("{}: process group '{}' has {} ops in flight already; wait for some",
                              work->op, name_, kCountMask));
    }
    uint64_t before = busy_.fetch_add(1 + (numbered ? kSeqOne : 0));
    if (numbered) work->seq = before >> kSeqShift;
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void WorkQueue::run_front(std::unique_lock<std::mutex>& lk) {
  std::shared_ptr<WorkState> w = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  current_ = w;
  lk.unlock();
  w->run();
  lk.lock();
  running_ = false;
  current_.reset();
  busy_.fetch_sub(1);
}

void WorkQueue::help(const WorkState& target) {
  std::unique_lock<std::mutex> lk(mu_);
  while (!target.done.load(std::memory_order_acquire) && !running_ && !claimed() &&
         !queue_.empty()) {
    run_front(lk);
    // The queue's thread waits for running_ to clear only when ops are left
    // (or when closing); waking it otherwise costs the next op a context switch.
    if (!queue_.empty() || closing_) cv_.notify_all();
  }
}

bool WorkQueue::try_claim(bool numbered, uint64_t* seq) {
  if (closing_.load(std::memory_order_relaxed)) return false;
  uint64_t idle = busy_.load(std::memory_order_relaxed);
  if ((idle & (kCountMask | kClaimed)) != 0) return false;
  // Fails (the caller queues its op instead) when another thread got there first.
  if (!busy_.compare_exchange_strong(idle, idle + kClaimed + (numbered ? kSeqOne : 0))) {
    return false;
  }
  if (numbered) *seq = idle >> kSeqShift;
  return true;
}

void WorkQueue::release() {
  // Sequentially consistent with push's increment and close's store: when
  // neither is seen here, the loop sees the claim gone when it checks.
  uint64_t before = busy_.fetch_sub(kClaimed);
  if ((before & kCountMask) != 0 || closing_.load()) {
    // Ops were pushed during the claim, or the group closes: wake the loop
    // (taking mu_ orders this with its check of the predicate).
    { std::lock_guard<std::mutex> lk(mu_); }
    cv_.notify_all();
  }
}

size_t WorkQueue::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  // A waiter wakes as soon as its op is done, before this thread has cleared
  // running_; that op must not count, or destroy() right after the last wait
  // would abort the peers still finishing it.
  bool running_not_done = running_ && !current_->done.load(std::memory_order_acquire);
  return queue_.size() + (running_not_done ? 1 : 0) + (claimed() ? 1 : 0);
}

void WorkQueue::close() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WorkQueue::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] {
      return (!running_ && !claimed() && !queue_.empty()) || (closing_ && queue_.empty());
    });
    if (queue_.empty()) {
      // closing_: wait for a helper or a claimer still running the last op.
      cv_.wait(lk, [&] { return !running_ && !claimed(); });
      if (queue_.empty()) return;
      continue;
    }
    run_front(lk);
  }
}

}  // namespace cohort::distributed::detail
