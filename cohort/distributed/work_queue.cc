#include "cohort/distributed/work_queue.h"

#include <fmt/format.h>

#include "cohort/base/error.h"

namespace cohort::distributed::detail {

WorkQueue::WorkQueue(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
}

WorkQueue::~WorkQueue() { close(); }

void WorkQueue::push(std::shared_ptr<WorkState> work) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closing_) {
      throw Error(fmt::format("{}: process group '{}' was destroyed", work->op, name_));
    }
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void WorkQueue::help(const WorkState& target) {
  std::unique_lock<std::mutex> lk(mu_);
  while (!target.done.load(std::memory_order_acquire) && !running_ && !queue_.empty()) {
    std::shared_ptr<WorkState> w = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    current_ = w;
    lk.unlock();
    w->run();
    lk.lock();
    running_ = false;
    current_.reset();
    // The queue's thread waits for running_ to clear only when ops are left
    // (or when closing); waking it otherwise costs the next op a context switch.
    if (!queue_.empty() || closing_) cv_.notify_all();
  }
}

bool WorkQueue::try_claim() {
  std::lock_guard<std::mutex> lk(mu_);
  if (closing_ || running_ || !queue_.empty()) return false;
  running_ = true;
  return true;
}

void WorkQueue::release() {
  std::lock_guard<std::mutex> lk(mu_);
  running_ = false;
  if (!queue_.empty() || closing_) cv_.notify_all();
}

size_t WorkQueue::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  // A waiter wakes as soon as its op is done, before this thread has cleared
  // running_; that op must not count, or destroy() right after the last wait
  // would abort the peers still finishing it.
  bool running_not_done =
      running_ && (!current_ || !current_->done.load(std::memory_order_acquire));
  return queue_.size() + (running_not_done ? 1 : 0);
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
    cv_.wait(lk, [&] { return (!running_ && !queue_.empty()) || (closing_ && queue_.empty()); });
    if (queue_.empty()) {
      // closing_: wait for a helper thread still running the last op.
      cv_.wait(lk, [&] { return !running_; });
      if (queue_.empty()) return;
      continue;
    }
    std::shared_ptr<WorkState> w = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    current_ = w;
    lk.unlock();
    w->run();
    lk.lock();
    running_ = false;
    current_.reset();
  }
}

}  // namespace cohort::distributed::detail
