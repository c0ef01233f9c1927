// optim::Optimizer: the base of SGD, Adam and AdamW, as torch.optim.Optimizer.
// An optimizer updates a list of parameters (leaf tensors; the caller, usually
// a Module, owns them -- the optimizer holds handles to the same tensors) in
// param groups, each with its own hyperparameters ("lr", "momentum", ... as
// doubles; booleans are 0/1). Per-parameter state (momentum buffers, Adam's
// moments and step counts) is created lazily on the first step.
//
// step() reads each parameter's grad() and updates the parameter in place
// under NoGradGuard, in one pass over its elements; parameters without a
// gradient are skipped (as in PyTorch). zero_grad() clears the gradients.
//
// state_dict() is a flat TensorDict, so a checkpoint can store it as tensors:
//   state.<i>.<key>            per-parameter state, i numbering the parameters
//                              across groups in order (PyTorch's numbering)
//   param_groups.<g>.<option>  0-d float64 hyperparameters
//   param_groups.<g>.params    int64 [n]: the indices of the group's parameters
// The values alias the optimizer's state (clone to snapshot). load_state_dict()
// checks the group layout, keys and shapes (errors name the key and both
// shapes) before changing anything, then copies.
//
// Thread safety: one thread at a time per optimizer; step() itself splits big
// parameters over the calling thread's budget (cohort::num_threads()).
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cohort/core/tensor.h"
#include "cohort/core/tensor_dict.h"

namespace cohort::optim {

using Options = std::vector<std::pair<std::string, double>>;

struct ParamGroup {
  std::vector<Tensor> params;
  // Hyperparameters in the optimizer's fixed order (see each optimizer).
  Options options;
  // The lr when the first LR scheduler was attached (PyTorch's initial_lr);
  // NaN until then. Not part of state_dict (schedulers save base_lrs).
  double initial_lr = std::numeric_limits<double>::quiet_NaN();

  // Throws InvalidArgument naming the option when it does not exist.
  double option(std::string_view name) const;
  void set_option(std::string_view name, double value);
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const std::string& name() const { return name_; }
  // Updates every parameter that has a gradient.
  virtual void step() = 0;
  // Zeroes gradients in place (PyTorch 1.13's default, keeping gradient
  // tensors that DDP points into its buckets), or drops them.
  void zero_grad(bool set_to_none = false);

  // A new group; `overrides` replace defaults by name (unknown names throw at
  // run time). Each optimizer also has a typed form taking its options struct
  // (SGD::add_param_group(params, SGDOptions), AdamW's with AdamWOptions),
  // where a misspelt option does not compile:
  //   optim::AdamWOptions o{.lr = 3e-4, .beta2 = 0.95, .weight_decay = 0.1};
  //   optim::AdamW opt(decay, o);
  //   o.weight_decay = 0;
  //   opt.add_param_group(no_decay, o);
  void add_param_group(std::vector<Tensor> params, const Options& overrides = {});
  size_t num_param_groups() const { return groups_.size(); }
  ParamGroup& param_group(size_t g);
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Learning rate of group g / of every group.
  double lr(size_t g = 0) const { return groups_.at(g).option("lr"); }
  void set_lr(double lr);
  // Number of parameters across groups.
  size_t num_params() const { return state_.size(); }

  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

 protected:
  // defaults: every option this optimizer knows, in order, "lr" included.
  Optimizer(std::string name, Options defaults);
  // Per-parameter state by global index (see the header comment).
  TensorDict& state(size_t param_index) { return state_[param_index]; }
  // State keys this optimizer may create, for load_state_dict's check.
  virtual std::vector<std::string> state_keys(const ParamGroup& group) const = 0;
  // Throws InvalidArgument for options out of range (lr < 0, ...).
  virtual void check_options(const Options& options) const = 0;
  // Index of the first parameter of group g.
  size_t group_offset(size_t g) const;

 private:
  std::string name_;
  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<TensorDict> state_;
};

// The parameter index i of a state_dict key "state.<i>.<key>", or -1 for
// the other keys (param_groups.*). For strategies that split or move
// per-parameter state between ranks.
int64_t state_key_param_index(std::string_view key);

}  // namespace cohort::optim
