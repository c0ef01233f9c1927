// The pipeline's schedule interpreter: Pipeline::run_plan runs this rank's
// list of a SchedulePlan's actions (forward, backward, its input and weight
// halves, sends and receives of activations and gradients) over the
// micro-batches of one step, and Pipeline::fail turns the first failure into
// the error every caller sees. The rest of Pipeline (construction, the step,
// replicas, state) is pipeline.cc.
#include "cohort/parallel/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "cohort/autograd/engine.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"

namespace cohort::parallel::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

// One (micro-batch, chunk) of a step.
struct Pipeline::MicroState {
  Tensor input;        // received activation (a leaf) or the micro-batch (first stage)
  Tensor output;       // the stage's output, with its graph (not on the last stage)
  Tensor loss;         // last stage: the scaled loss, with its graph
  Tensor grad_output;  // received gradient of output
  Tensor grad_input;   // gradient of input, to send
  autograd::DeferredGradients deferred;  // ZB: the W half
  int64_t bytes = 0;                     // layer outputs kept for backward
};

void Pipeline::run_plan(const SchedulePlan& plan, const std::vector<Tensor>& inputs,
                        const std::vector<Tensor>& targets, const LossFn* loss_fn,
                        std::vector<Tensor>* outputs, int64_t batch) {
  ++step_count_;
  const auto t0 = Clock::now();
  stats_ = PipelineStats{};
  stats_loss_ = 0;
  in_flight_ = 0;
  in_flight_bytes_ = 0;
  channel_.reset_timers();
  std::vector<MicroState> st(static_cast<size_t>(plan.micro_batches * plan.chunks));
  const auto& list = plan.actions[static_cast<size_t>(rank_)];
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    try {
      run_action(plan, a, st, inputs, targets, loss_fn, outputs, batch);
    } catch (const std::exception& e) {
      fail(e, a, i);
    }
    recent_[recent_count_++ % recent_.size()] = {step_count_, i, a};
    ++stats_.actions;
  }
  try {
    channel_.wait_sends();
  } catch (const std::exception& e) {
    fail(e, Action{ActionKind::kSendForward, -1, -1, -1}, list.size());
  }
  stats_.step_seconds = seconds_since(t0);
  stats_.recv_seconds = channel_.recv_seconds();
  stats_.send_wait_seconds = channel_.send_wait_seconds();
  stats_.bubble_fraction =
      stats_.step_seconds > 0 ? 1.0 - stats_.compute_seconds / stats_.step_seconds : 0.0;
}

void Pipeline::run_action(const SchedulePlan& plan, const Action& a, std::vector<MicroState>& st,
                          const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                          const LossFn* loss_fn, std::vector<Tensor>* outputs, int64_t batch) {
  const int S = plan.num_stages();
  const int s = plan.stage_of(rank_, a.chunk);
  auto at = [&](int mb, int chunk) -> MicroState& {
    return st[static_cast<size_t>(mb * plan.chunks + chunk)];
  };
  MicroState& ms = at(a.mb, a.chunk);
  const bool training = outputs == nullptr;
  auto backward_roots = [&](std::vector<Tensor>& roots, std::vector<Tensor>& grads) {
    if (s == S - 1) {
      roots = {ms.loss};
      grads = {Tensor()};
    } else {
      COHORT_CHECK(ms.grad_output.defined(), "no gradient for the output of micro-batch {}", a.mb);
      roots = {ms.output};
      grads = {ms.grad_output};
    }
  };
  // After B or BW: the input's gradient, handed to a local previous stage.
  auto take_input_grad = [&]() {
    if (s > 0 && ms.input.defined() && ms.input.requires_grad()) ms.grad_input = ms.input.grad();
    if (s > 0 && plan.rank_of_stage(s - 1) == rank_)
      at(a.mb, plan.chunk_of_stage(s - 1)).grad_output = ms.grad_input;
    ms.grad_output = Tensor();
  };
  auto release = [&]() {
    ms.output = Tensor();
    ms.loss = Tensor();
    ms.input = Tensor();
    --in_flight_;
    in_flight_bytes_ -= ms.bytes;
  };
  const auto t0 = Clock::now();
  switch (a.kind) {
    case ActionKind::kForward: {
      Tensor x = s == 0 ? inputs[static_cast<size_t>(a.mb)] : ms.input;
      COHORT_CHECK(x.defined(), "no input for micro-batch {}", a.mb);
      std::optional<EnableGradGuard> grad_on;
      if (training) grad_on.emplace();
      int64_t bytes = x.nbytes();
      for (const auto& child : stages_[static_cast<size_t>(a.chunk)]->children()) {
        x = child->forward(x);
        bytes += static_cast<int64_t>(x.nbytes());
      }
      if (s + 1 < S) {
        ms.output = x;
        if (plan.rank_of_stage(s + 1) == rank_) {
          Tensor next = x.detach();
          if (training) next.set_requires_grad(true);
          at(a.mb, plan.chunk_of_stage(s + 1)).input = next;
        }
      } else if (training) {
        const Tensor& y = targets[static_cast<size_t>(a.mb)];
        Tensor loss = (*loss_fn)(x, y);
        COHORT_CHECK(loss.numel() == 1, "the loss function returned {} elements, not 1",
                     loss.numel());
        ms.loss = mul(loss, double(y.size(0)) / double(batch));
        stats_loss_ += ms.loss.item<double>();
      } else {
        (*outputs)[static_cast<size_t>(a.mb)] = x;
      }
      if (training) {
        ms.bytes = bytes;
        stats_.peak_in_flight = std::max(stats_.peak_in_flight, ++in_flight_);
        in_flight_bytes_ += bytes;
        stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, in_flight_bytes_);
      }
      stats_.compute_seconds += seconds_since(t0);
      break;
    }
    case ActionKind::kBackward: {
      std::vector<Tensor> roots, grads;
      backward_roots(roots, grads);
      if (roots[0].requires_grad()) autograd::run_backward(roots, grads);
      take_input_grad();
      release();
      stats_.compute_seconds += seconds_since(t0);
      break;
    }
    case ActionKind::kBackwardInput: {
      std::vector<Tensor> roots, grads;
      backward_roots(roots, grads);
      std::vector<Tensor> wrt;
      if (s > 0 && ms.input.requires_grad()) wrt.push_back(ms.input);
      if (roots[0].requires_grad()) ms.deferred = autograd::run_backward_split(roots, grads, wrt);
      take_input_grad();
      // The graph lives on in `deferred` until W; drop the handles now.
      ms.output = Tensor();
      ms.loss = Tensor();
      ms.input = Tensor();
      stats_.compute_seconds += seconds_since(t0);
      break;
    }
    case ActionKind::kBackwardWeight:
      ms.deferred.run();
      ms.deferred = autograd::DeferredGradients();
      release();
      stats_.compute_seconds += seconds_since(t0);
      break;
    case ActionKind::kSendForward:
      channel_.send(ms.output.detach(), {false, a.mb, s + 1, step_count_}, a.peer);
      break;
    case ActionKind::kRecvForward: {
      Tensor t = channel_.recv({false, a.mb, s, step_count_}, a.peer);
      if (training) t.set_requires_grad(true);
      ms.input = t;
      break;
    }
    case ActionKind::kSendBackward:
      COHORT_CHECK(ms.grad_input.defined(),
                   "no input gradient for micro-batch {} (does the "
                   "stage's output depend on its input?)",
                   a.mb);
      channel_.send(ms.grad_input, {true, a.mb, s - 1, step_count_}, a.peer);
      ms.grad_input = Tensor();
      break;
    case ActionKind::kRecvBackward: {
      Shape shape = ms.output.defined() ? ms.output.sizes() : Shape{};
      ms.grad_output = channel_.recv({true, a.mb, s, step_count_}, a.peer,
                                     ms.output.defined() ? &shape : nullptr);
      break;
    }
  }
}

void Pipeline::fail(const std::exception& e, const Action& a, size_t index) {
  broken_ = true;
  channel_.drop_sends();
  std::string what = index == SIZE_MAX ? "the loss/gradient exchange after the schedule"
                     : a.mb < 0        ? "waiting for the step's sends"
                                       : fmt::format("action {} {}", index, to_string(a));
  std::string recent;
  const size_t n = std::min(recent_count_, recent_.size());
  for (size_t k = recent_count_ - n; k < recent_count_; ++k) {
    const auto& [call, i, act] = recent_[k % recent_.size()];
    recent += fmt::format("{}{}:{} {}", recent.empty() ? "" : ", ", call, i, to_string(act));
  }
  std::string stages;
  for (int c = 0; c < plan_.chunks; ++c)
    stages += fmt::format("{}{}", c ? "," : "", plan_.stage_of(rank_, c));
  const std::string prefix =
      fmt::format("pipeline {} rank {} (stage {}, step {}): {} failed: ", plan_.describe(), rank_,
                  stages, step_count_, what);
  const std::string suffix = fmt::format(" [last actions: {}]", recent.empty() ? "none" : recent);
  // The peers may wait on this rank: fail their ops now, not at the timeout.
  try {
    grid_.pp->abort(prefix + e.what() + suffix);
  } catch (...) {
  }
  // e is the exception being handled: rethrown with its cohort type (what
  // distributed::detail::with_context does, with the action list after the
  // cause, where the messages have always had it).
  std::rethrow_exception(with_message(std::current_exception(), prefix, suffix));
}

}  // namespace cohort::parallel::pipeline
