#include "cohort/parallel/reduction_scheduler.h"

#include <fmt/format.h>

#include <exception>
#include <utility>

#include "cohort/base/error.h"

namespace cohort::parallel {
namespace {

constexpr size_t kNoGroup = static_cast<size_t>(-1);

}  // namespace

ReductionScheduler::ReductionScheduler(std::vector<std::string> key_names,
                                       std::vector<std::vector<size_t>> groups,
                                       ReductionSchedulerOptions options,
                                       ReductionCallbacks callbacks)
    : names_(std::move(key_names)),
      groups_(std::move(groups)),
      group_of_(names_.size(), kNoGroup),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)) {
  COHORT_CHECK(callbacks_.launch != nullptr, "{}: ReductionScheduler needs a launch callback",
               options_.what);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t k : groups_[g]) {
      COHORT_CHECK(k < names_.size(), "{}: group {} names key {} of {}", options_.what, g, k,
                   names_.size());
      COHORT_CHECK(group_of_[k] == kNoGroup, "{}: key '{}' is in groups {} and {}", options_.what,
                   names_[k], group_of_[k], g);
      group_of_[k] = g;
    }
  }
  ready_.assign(names_.size(), false);
  used_.assign(names_.size(), 0);
  reset();
}

ReductionScheduler::~ReductionScheduler() { drain(); }

void ReductionScheduler::reset() {
  armed_ = false;
  launch_ = true;
  any_ready_ = false;
  unused_marked_ = false;
  std::fill(ready_.begin(), ready_.end(), false);
  unused_.clear();
  pending_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) pending_[g] = groups_[g].size();
  reductions_.assign(groups_.size(), BucketReduction{});
  follow_ups_.assign(groups_.size(), BucketReduction{});
  next_launch_ = 0;
  next_finish_ = 0;
  accumulated_ = 0;
}

void ReductionScheduler::arm(std::vector<size_t> unused, bool launch) {
  reset();
  armed_ = true;
  launch_ = launch;
  unused_ = std::move(unused);
}

std::string ReductionScheduler::describe_unready() const {
  std::string names;
  size_t count = 0;
  for (size_t k = 0; k < names_.size(); ++k) {
    if (ready_[k] || group_of_[k] == kNoGroup) continue;
    if (count < 8) names += (count ? ", " : "") + ("'" + names_[k] + "'");
    ++count;
  }
  if (count > 8) names += fmt::format(" and {} more", count - 8);
  return fmt::format("{} parameter(s) received no gradient: {}", count, names);
}

void ReductionScheduler::throw_if_unfinished() {
  if (!unfinished()) return;
  std::string unready = describe_unready();
  reset();
  throw InvalidArgument(fmt::format(
      "{} (rank {}): the previous iteration's gradient reduction did not finish: {}. {}",
      options_.what, options_.rank, unready, options_.unfinished_advice));
}

bool ReductionScheduler::mark_ready(size_t key) {
  used_[key] = 1;
  if (!armed_) return false;  // no_sync, or no forward through the wrapper
  try {
    any_ready_ = true;
    const size_t before = launch_ ? next_launch_ : accumulated_;
    if (!unused_marked_) {
      unused_marked_ = true;
      for (size_t u : unused_) mark_one(u);
    }
    mark_one(key);
    if (launch_) return before < groups_.size() && next_launch_ == groups_.size();
    return before < groups_.size() && accumulated_ == groups_.size();
  } catch (...) {
    reset();
    throw;
  }
}

bool ReductionScheduler::mark_all_ready() {
  if (!armed_) return false;
  try {
    any_ready_ = true;
    unused_marked_ = true;
    for (size_t k = 0; k < names_.size(); ++k) {
      if (group_of_[k] == kNoGroup) continue;
      ready_[k] = true;
      if (callbacks_.on_ready) callbacks_.on_ready(k);
    }
    std::fill(pending_.begin(), pending_.end(), size_t{0});
    if (!launch_) {
      for (size_t g = accumulated_; g < groups_.size(); ++g)
        if (callbacks_.on_accumulated) callbacks_.on_accumulated(g);
      accumulated_ = groups_.size();
      return true;
    }
    launch_ready();
    return true;
  } catch (...) {
    reset();
    throw;
  }
}

bool ReductionScheduler::mark_rest_unused() {
  if (!armed_) return false;
  try {
    const size_t before = launch_ ? next_launch_ : accumulated_;
    unused_marked_ = true;
    for (size_t k = 0; k < names_.size(); ++k)
      if (!ready_[k] && group_of_[k] != kNoGroup) mark_one(k);
    any_ready_ = true;
    if (launch_) return before < groups_.size() && next_launch_ == groups_.size();
    return before < groups_.size() && accumulated_ == groups_.size();
  } catch (...) {
    reset();
    throw;
  }
}

void ReductionScheduler::mark_one(size_t key) {
  if (ready_[key]) {
    throw InvalidArgument(
        fmt::format("{} (rank {}): parameter '{}' got its gradient twice in one iteration ({})",
                    options_.what, options_.rank, names_[key], options_.twice_hint));
  }
  ready_[key] = true;
  if (callbacks_.on_ready) callbacks_.on_ready(key);
  const size_t g = group_of_[key];
  if (g == kNoGroup || --pending_[g] != 0) return;
  if (launch_) {
    launch_ready();
  } else {
    ++accumulated_;
    if (callbacks_.on_accumulated) callbacks_.on_accumulated(g);
  }
}

bool ReductionScheduler::launch_ready() {
  const size_t before = next_launch_;
  while (next_launch_ < groups_.size() && pending_[next_launch_] == 0) {
    // The cap bounds the memory the outstanding reductions hold (ZeRO's
    // rank-major copies): the oldest finish before another starts.
    while (options_.max_in_flight > 0 && next_launch_ - next_finish_ >= options_.max_in_flight)
      finish_next();
    const size_t g = next_launch_++;
    BucketReduction r = callbacks_.launch(g);
    launched_bytes_ += r.bytes;
    reductions_[g] = std::move(r);
  }
  return next_launch_ == groups_.size() && (before < next_launch_ || groups_.empty());
}

void ReductionScheduler::finish_next() {
  const size_t g = next_finish_;
  BucketReduction& r = reductions_[g];
  try {
    if (r.work.defined()) r.work.wait();
    // next_finish_ moves first: a follow-up the finish step starts is
    // outstanding, this group's own reduction no longer.
    ++next_finish_;
    if (r.finish) {
      std::function<void()> finish = std::move(r.finish);
      r.finish = nullptr;
      finish();
    }
  } catch (...) {
    fail(g, 0);
  }
}

void ReductionScheduler::then(size_t group, BucketReduction follow_up) {
  COHORT_CHECK(group < groups_.size(), "{}: then() for group {} of {}", options_.what, group,
               groups_.size());
  launched_bytes_ += follow_up.bytes;
  follow_ups_[group] = std::move(follow_up);
}

void ReductionScheduler::wait_all() {
  COHORT_CHECK(next_launch_ == groups_.size(),
               "{} (rank {}): wait_all with {} of {} groups launched", options_.what, options_.rank,
               next_launch_, groups_.size());
  while (next_finish_ < groups_.size()) finish_next();
  for (size_t g = 0; g < groups_.size(); ++g) {
    BucketReduction& r = follow_ups_[g];
    if (!r.work.defined() && !r.finish) continue;
    try {
      if (r.work.defined()) r.work.wait();
      std::function<void()> finish = std::move(r.finish);
      r = BucketReduction{};
      if (finish) finish();
    } catch (...) {
      fail(g, 1);
    }
  }
  armed_ = false;
  any_ready_ = false;
  std::fill(used_.begin(), used_.end(), uint8_t{0});
  ++num_completed_;
}

void ReductionScheduler::fail(size_t group, int stage) {
  std::exception_ptr e = std::current_exception();
  // The other launched ops end before the error is reported: their buffers
  // are the caller's and go away with the iteration.
  drain();
  const std::string context = callbacks_.describe ? callbacks_.describe(group, stage) : "";
  if (!context.empty()) e = distributed::detail::with_context(e, context);
  reset();
  std::rethrow_exception(e);
}

void ReductionScheduler::drain() noexcept {
  for (std::vector<BucketReduction>* list : {&reductions_, &follow_ups_}) {
    for (BucketReduction& r : *list) {
      if (!r.work.defined()) continue;
      try {
        r.work.wait();
      } catch (...) {
        // Reported by whoever waited first, or the failure being reported.
      }
    }
  }
}

}  // namespace cohort::parallel
