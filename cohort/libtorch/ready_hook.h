// ReadyHook: a post hook for a parameter's gradient accumulator
// (torch::autograd::impl::grad_accumulator(p)->add_post_hook(...)) that calls
// fn() once the accumulator has put the gradient in .grad; what DDP's
// reducer and ZeRO's overlapped stage 2 hang on every parameter. fn runs on
// the thread that runs backward; an exception it throws leaves backward().
// Internal to cohort/libtorch.
#pragma once

#include <torch/csrc/autograd/function_hook.h>

#include <functional>
#include <utility>

namespace cohort::libtorch::detail {

struct ReadyHook : torch::autograd::FunctionPostHook {
  explicit ReadyHook(std::function<void()> fn) : fn(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn();
    return outputs;
  }
  std::function<void()> fn;
};

}  // namespace cohort::libtorch::detail
