#include "cohort/parallel/join.h"

#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::parallel {
namespace {

// The ranks marked in a [world] vector of "ran out" flags.
std::string ranks_marked(const Tensor& flags) {
  std::vector<float> v = flags.cpu().to_vector<float>();
  std::string out;
  for (size_t r = 0; r < v.size(); ++r)
    if (v[r] != 0) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

Join::Join(std::vector<Joinable*> joinables, JoinOptions options)
    : joinables_(std::move(joinables)), options_(options) {
  COHORT_CHECK(!joinables_.empty(), "Join: needs at least one joinable (e.g. the DDP model)");
  for (size_t i = 0; i < joinables_.size(); ++i) {
    Joinable* j = joinables_[i];
    COHORT_CHECK(j != nullptr, "Join: joinable {} is null", i);
    COHORT_CHECK(j->join_ == nullptr, "Join: joinable {} is already in another Join", i);
    j->check_joinable(options_, i, joinables_.size());
    distributed::ProcessGroup& pg = j->join_process_group();
    if (pg_ == nullptr) {
      pg_ = &pg;
      device_ = j->join_device();
    } else {
      COHORT_CHECK(pg_ == &pg,
                   "Join: the joinables use different process groups (joinable {}); one Join "
                   "covers one group",
                   i);
    }
  }
  for (size_t i = 0; i < joinables_.size(); ++i) {
    joinables_[i]->join_ = this;
    joinables_[i]->join_options_ = options_;
    joinables_[i]->first_joinable_ = i == 0;
  }
}

Join::~Join() {
  for (Joinable* j : joinables_) {
    j->join_ = nullptr;
    j->first_joinable_ = false;
  }
}

std::optional<JoinCount> Join::notify_join_context(Joinable& j) {
  if (!j.join_enabled() || !j.first_joinable_) return std::nullopt;
  distributed::ProcessGroup& pg = j.join_process_group();
  JoinCount c;
  c.count = Tensor::ones({1}, DType::kFloat32, j.join_device());
  c.work = pg.all_reduce(c.count, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
  if (j.join_options().throw_on_early_termination) {
    Tensor out = Tensor::zeros({pg.size()}, DType::kFloat32, j.join_device());
    pg.all_reduce(out, {.op = distributed::ReduceOp::kSum});
    const std::string ran_out = ranks_marked(out);
    if (!ran_out.empty()) {
      c.work.wait();
      throw Error(
          fmt::format("Join (rank {}): rank(s) {} ran out of inputs while this rank still has some "
                      "(throw_on_early_termination); every rank stops here",
                      pg.rank(), ran_out));
    }
  }
  return c;
}

void Join::finish() {
  COHORT_CHECK(!finished_, "Join (rank {}): finish() called twice", pg_->rank());
  finished_ = true;
  if (!options_.enable) return;
  bool is_last_joiner = true;
  for (int64_t iteration = 0;; ++iteration) {
    if (iteration == 1000) {
      COHORT_WARN(
          "Join (rank {}): 1000 iterations of the other ranks since this one ran out of inputs; "
          "such uneven inputs waste the time of the ranks that shadow them",
          pg_->rank());
    }
    Tensor count = Tensor::zeros({1}, DType::kFloat32, device_);
    pg_->all_reduce(count, {.op = distributed::ReduceOp::kSum});
    ranks_training_ = static_cast<int>(count.cpu().item<float>());
    if (ranks_training_ == 0) break;
    if (options_.throw_on_early_termination) {
      Tensor flags = Tensor::zeros({pg_->size()}, DType::kFloat32);
      flags.data_ptr<float>()[pg_->rank()] = 1;
      flags = flags.to(device_);
      pg_->all_reduce(flags, {.op = distributed::ReduceOp::kSum});
      throw Error(fmt::format(
          "Join (rank {}): rank(s) {} ran out of inputs while other ranks still have some "
          "(throw_on_early_termination); every rank stops here",
          pg_->rank(), ranks_marked(flags)));
    }
    for (Joinable* j : joinables_) j->join_shadow_iteration();
    is_last_joiner = false;
  }
  for (Joinable* j : joinables_) j->join_finish(is_last_joiner);
}

void run_joined(std::vector<Joinable*> joinables, JoinOptions options,
                const std::function<void()>& body) {
  Join join(std::move(joinables), options);
  body();
  join.finish();
}

}  // namespace cohort::parallel
