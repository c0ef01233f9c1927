#include "cohort/parallel/parameter_server/parameter_server.h"

#include <fmt/format.h>

#include <algorithm>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::parallel {

const char* ps_mode_name(PsMode mode) {
  switch (mode) {
    case PsMode::kSync:
      return "sync";
    case PsMode::kSsp:
      return "ssp";
    case PsMode::kAsync:
      return "async";
  }
  return "?";
}

PsMode parse_ps_mode(const std::string& name) {
  if (name == "sync") return PsMode::kSync;
  if (name == "ssp") return PsMode::kSsp;
  if (name == "async") return PsMode::kAsync;
  throw InvalidArgument(
      fmt::format("parameter server: unknown mode '{}' (expected sync, ssp or async)", name));
}

namespace {

std::string list_names(const std::vector<int>& workers,
                       const std::function<std::string(int)>& name) {
  std::string out;
  for (int w : workers) {
    if (!out.empty()) out += ", ";
    out += name(w);
  }
  return out;
}

}  // namespace

ParameterServer::ParameterServer(const nn::NamedTensors& shard,
                                 const OptimizerFactory& make_optimizer,
                                 ParameterServerOptions options)
    : options_(std::move(options)) {
  COHORT_CHECK(options_.num_workers >= 1, "{}: num_workers must be >= 1, got {}", options_.name,
               options_.num_workers);
  COHORT_CHECK(options_.worker_names.empty() ||
                   options_.worker_names.size() == static_cast<size_t>(options_.num_workers),
               "{}: {} worker names for {} workers", options_.name, options_.worker_names.size(),
               options_.num_workers);
  COHORT_CHECK(options_.timeout.count() > 0, "{}: timeout must be positive", options_.name);
  COHORT_CHECK(make_optimizer != nullptr, "{}: no optimizer factory", options_.name);
  switch (options_.mode) {
    case PsMode::kSync:
      staleness_ = 0;
      break;
    case PsMode::kSsp:
      COHORT_CHECK(options_.staleness >= 0, "{}: ssp staleness must be >= 0, got {}", options_.name,
                   options_.staleness);
      staleness_ = options_.staleness;
      break;
    case PsMode::kAsync:
      staleness_ = kUnboundedStaleness;
      break;
  }
  for (const auto& [name, t] : shard) {
    names_.push_back(name);
    Tensor w = t.detach().clone();
    w.set_requires_grad(true);
    weights_.push_back(w);
  }
  // An empty shard (more servers than parameters) still counts clocks; it
  // has nothing to optimize.
  if (!weights_.empty()) {
    optimizer_ = make_optimizer(weights_);
    COHORT_CHECK(optimizer_ != nullptr, "{}: the optimizer factory returned null", options_.name);
  }
  const auto n = static_cast<size_t>(options_.num_workers);
  state_.assign(n, WorkerState::kActive);
  clocks_.assign(n, 0);
  last_seen_.assign(n, Clock::now());
  pending_.resize(n);
  stats_.active_workers = options_.num_workers;
}

ParameterServer::~ParameterServer() = default;

std::string ParameterServer::worker_name(int worker) const {
  if (worker >= 0 && static_cast<size_t>(worker) < options_.worker_names.size())
    return fmt::format("'{}' (worker {})", options_.worker_names[static_cast<size_t>(worker)],
                       worker);
  return fmt::format("worker {}", worker);
}

void ParameterServer::check_worker(int worker, const char* op) const {
  COHORT_CHECK(worker >= 0 && worker < options_.num_workers,
               "{}: {} from worker {}, but there are {} workers (0..{})", options_.name, op, worker,
               options_.num_workers, options_.num_workers - 1);
  rethrow_failure();
  const auto w = static_cast<size_t>(worker);
  if (state_[w] == WorkerState::kLost) {
    std::string reason;
    for (const auto& l : stats_.lost)
      if (l.worker == worker) reason = l.reason;
    throw Error(fmt::format("{}: {} from {}, which was dropped as lost ({})", options_.name, op,
                            worker_name(worker), reason));
  }
  if (state_[w] == WorkerState::kFinished)
    throw InvalidArgument(fmt::format("{}: {} from {}, which already finished", options_.name, op,
                                      worker_name(worker)));
}

void ParameterServer::rethrow_failure() const {
  if (failure_) std::rethrow_exception(failure_);
}

void ParameterServer::fail(std::exception_ptr error) {
  if (!failure_) failure_ = std::move(error);
  cv_.notify_all();
}

int64_t ParameterServer::min_active_clock() const {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < state_.size(); ++w)
    if (state_[w] == WorkerState::kActive) m = std::min(m, clocks_[w]);
  return m;
}

bool ParameterServer::pull_may_proceed(int64_t clock) const {
  if (options_.mode == PsMode::kAsync) return true;
  const int64_t slowest = min_active_clock();
  if (slowest >= clock) return true;
  return clock - slowest <= staleness_;
}

std::vector<int> ParameterServer::laggards(int64_t clock) const {
  std::vector<int> out;
  for (size_t w = 0; w < state_.size(); ++w)
    if (state_[w] == WorkerState::kActive && clock - clocks_[w] > staleness_)
      out.push_back(static_cast<int>(w));
  return out;
}

PullResult ParameterServer::pull(int worker, int64_t clock) {
  std::unique_lock<std::mutex> lock(mu_);
  check_worker(worker, "pull");
  const auto w = static_cast<size_t>(worker);
  COHORT_CHECK(clock == clocks_[w],
               "{}: pull from {} for step {}, but it has pushed {} steps (a pull must be for "
               "the step after its last push)",
               options_.name, worker_name(worker), clock, clocks_[w]);
  last_seen_[w] = Clock::now();
  if (!pull_may_proceed(clock)) {
    ++stats_.pulls_waited;
    waiting_clocks_.push_back(clock);
    const auto deadline = Clock::now() + options_.timeout;
    bool ok = cv_.wait_until(lock, deadline, [&] {
      return failure_ || state_[w] != WorkerState::kActive || pull_may_proceed(clock);
    });
    waiting_clocks_.erase(std::find(waiting_clocks_.begin(), waiting_clocks_.end(), clock));
    check_worker(worker, "pull");
    if (!ok) {
      auto slow = laggards(clock);
      auto name = [this](int v) {
        return fmt::format("{} at step {}", worker_name(v), clocks_[static_cast<size_t>(v)]);
      };
      std::string what =
          options_.mode == PsMode::kSync
              ? fmt::format("{}: sync step {} did not complete within {} ms: no gradients from {}",
                            options_.name, clock - 1, options_.timeout.count(),
                            list_names(slow, name))
              : fmt::format(
                    "{}: pull of step {} from {} waited {} ms for the slowest workers ({}; "
                    "staleness bound {})",
                    options_.name, clock, worker_name(worker), options_.timeout.count(),
                    list_names(slow, name), staleness_);
      auto error = std::make_exception_ptr(TimeoutError(what));
      // A synchronous step that cannot complete fails the whole job: every
      // other pull would wait for the same missing gradients.
      if (options_.mode == PsMode::kSync) fail(error);
      std::rethrow_exception(error);
    }
  }
  const int64_t slowest = min_active_clock();
  if (slowest < clock) stats_.max_clock_gap = std::max(stats_.max_clock_gap, clock - slowest);
  ++stats_.pulls;
  PullResult r;
  r.version = stats_.version;
  r.weights.reserve(weights_.size());
  for (const auto& t : weights_) r.weights.push_back(t.detach().clone());
  return r;
}

void ParameterServer::push(int worker, int64_t clock, std::vector<Tensor> grads) {
  std::unique_lock<std::mutex> lock(mu_);
  check_worker(worker, "push");
  const auto w = static_cast<size_t>(worker);
  COHORT_CHECK(clock == clocks_[w], "{}: push from {} for step {}, but its clock is {}",
               options_.name, worker_name(worker), clock, clocks_[w]);
  COHORT_CHECK(grads.size() == weights_.size(),
               "{}: push from {} has {} gradients for {} parameters", options_.name,
               worker_name(worker), grads.size(), weights_.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    COHORT_CHECK(grads[i].sizes() == weights_[i].sizes() && grads[i].dtype() == weights_[i].dtype(),
                 "{}: push from {}: gradient of {} has shape {} {}, the parameter {} {}",
                 options_.name, worker_name(worker), names_[i], shape_str(grads[i].sizes()),
                 dtype_name(grads[i].dtype()), shape_str(weights_[i].sizes()),
                 dtype_name(weights_[i].dtype()));
  }
  last_seen_[w] = Clock::now();
  ++stats_.pushes;
  if (options_.mode == PsMode::kSync) {
    // Every pull of step `clock` was answered after step clock-1 was taken,
    // so the server is at version `clock` here.
    COHORT_ASSERT(stats_.version == clock, "{}: sync push of step {} at version {}", options_.name,
                  clock, stats_.version);
    pending_[w] = std::move(grads);
    clocks_[w] = clock + 1;
    maybe_step_sync();
  } else {
    const double scale = options_.push_scale == PushScale::kMean ? 1.0 / options_.num_workers : 1.0;
    apply(grads, scale);
    ++stats_.version;
    clocks_[w] = clock + 1;
  }
  cv_.notify_all();
}

void ParameterServer::apply(std::vector<Tensor>& grads, double scale) {
  if (!optimizer_) return;
  NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i) {
    Tensor& g = weights_[i].mutable_grad();
    if (!grads[i].defined()) {
      if (g.defined()) g.zero_();
      continue;
    }
    if (!g.defined()) g = Tensor::zeros(weights_[i].sizes(), weights_[i].dtype());
    g.copy_(grads[i]);
    if (scale != 1.0) g.mul_(scale);
  }
  optimizer_->step();
}

void ParameterServer::maybe_step_sync() {
  const int64_t step = stats_.version;
  for (size_t w = 0; w < state_.size(); ++w)
    if (state_[w] == WorkerState::kActive && clocks_[w] != step + 1)
      return;  // an active worker has not pushed this step yet
  // Workers that pushed this step and then finished count too.
  int contributors = 0;
  std::vector<Tensor> sum(weights_.size());
  for (size_t w = 0; w < state_.size(); ++w) {
    if (pending_[w].empty()) continue;
    ++contributors;
    for (size_t i = 0; i < weights_.size(); ++i) {
      const Tensor& g = pending_[w][i];
      if (!g.defined()) continue;
      // Summed in worker order, not arrival order: the result is the same
      // whichever worker's push came first.
      if (!sum[i].defined()) {
        sum[i] = g.contiguous().clone();
      } else {
        sum[i].add_(g);
      }
    }
    pending_[w].clear();
  }
  if (contributors == 0) return;
  apply(sum, 1.0 / contributors);
  ++stats_.version;
}

void ParameterServer::finish(int worker) {
  std::lock_guard<std::mutex> lock(mu_);
  COHORT_CHECK(worker >= 0 && worker < options_.num_workers,
               "{}: finish from worker {}, but there are {} workers", options_.name, worker,
               options_.num_workers);
  const auto w = static_cast<size_t>(worker);
  if (state_[w] != WorkerState::kActive) return;
  state_[w] = WorkerState::kFinished;
  stats_.finished.push_back(worker);
  --stats_.active_workers;
  if (options_.mode == PsMode::kSync && !failure_) maybe_step_sync();
  cv_.notify_all();
}

void ParameterServer::drop_worker(int worker, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  COHORT_CHECK(worker >= 0 && worker < options_.num_workers,
               "{}: drop_worker({}), but there are {} workers", options_.name, worker,
               options_.num_workers);
  const auto w = static_cast<size_t>(worker);
  if (state_[w] != WorkerState::kActive) return;
  state_[w] = WorkerState::kLost;
  pending_[w].clear();
  --stats_.active_workers;
  stats_.lost.push_back({worker,
                         worker < static_cast<int>(options_.worker_names.size())
                             ? options_.worker_names[w]
                             : fmt::format("worker {}", worker),
                         reason});
  if (options_.mode == PsMode::kSync) {
    // The step cannot be the average over all workers any more.
    fail(std::make_exception_ptr(PeerLost(
        fmt::format("{}: sync step {} cannot complete: {} was lost at step {}: {}", options_.name,
                    stats_.version, worker_name(worker), clocks_[w], reason))));
    COHORT_WARN("{}: {} lost at step {}: {}; the synchronous job fails", options_.name,
                worker_name(worker), clocks_[w], reason);
  } else {
    COHORT_WARN("{}: {} lost at step {}: {}; going on with {} workers", options_.name,
                worker_name(worker), clocks_[w], reason, stats_.active_workers);
  }
  cv_.notify_all();
}

bool ParameterServer::wait_done(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  bool ok = cv_.wait_for(lock, timeout, [&] { return failure_ || stats_.active_workers == 0; });
  rethrow_failure();
  return ok;
}

std::vector<int> ParameterServer::silent_workers(std::chrono::milliseconds age) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  const auto now = Clock::now();
  for (size_t w = 0; w < state_.size(); ++w)
    if (state_[w] == WorkerState::kActive && now - last_seen_[w] > age)
      out.push_back(static_cast<int>(w));
  return out;
}

std::vector<int> ParameterServer::awaited_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (int64_t clock : waiting_clocks_)
    for (int w : laggards(clock))
      if (std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  return out;
}

TensorDict ParameterServer::state_dict() const {
  std::lock_guard<std::mutex> lock(mu_);
  TensorDict d;
  for (size_t i = 0; i < weights_.size(); ++i) d.insert(names_[i], weights_[i].detach().clone());
  return d;
}

void ParameterServer::load_state_dict(const TensorDict& dict) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < weights_.size(); ++i) {
    const Tensor* t = dict.find(names_[i]);
    COHORT_CHECK(t != nullptr, "{}: load_state_dict: no '{}' in the state", options_.name,
                 names_[i]);
    COHORT_CHECK(t->sizes() == weights_[i].sizes(),
                 "{}: load_state_dict: '{}' has shape {}, the parameter {}", options_.name,
                 names_[i], shape_str(t->sizes()), shape_str(weights_[i].sizes()));
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i) weights_[i].copy_(dict.at(names_[i]));
}

TensorDict ParameterServer::optimizer_state_dict() const {
  std::lock_guard<std::mutex> lock(mu_);
  TensorDict d;
  if (!optimizer_) return d;
  for (const auto& [k, v] : optimizer_->state_dict()) d.insert(k, v.clone());
  return d;
}

void ParameterServer::load_optimizer_state_dict(const TensorDict& dict) {
  std::lock_guard<std::mutex> lock(mu_);
  COHORT_CHECK(optimizer_ != nullptr, "{}: load_optimizer_state_dict: the server has no optimizer",
               options_.name);
  optimizer_->load_state_dict(dict);
}

ParameterServerStats ParameterServer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::exception_ptr ParameterServer::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

}  // namespace cohort::parallel
