// nn::BatchNorm1d / BatchNorm2d, as torch.nn.BatchNorm1d/2d.
// BatchNorm2d: x [N, C, H, W]; BatchNorm1d: x [N, C] or [N, C, L]; output has
// x's shape. Parameters weight (ones) and bias (zeros) [C] when affine;
// buffers running_mean (zeros) [C], running_var (ones) [C] and
// num_batches_tracked (int64 0-d) when track_running_stats -- in that order,
// so state_dict() names them exactly as PyTorch does.
// Training mode normalises with batch statistics and updates the running
// buffers (running = (1 - m) running + m batch, unbiased variance; m =
// momentum, or 1/num_batches_tracked when momentum is nullopt, PyTorch's
// cumulative average). Eval mode uses the running buffers.
// Training across processes: set_sync() hands the training-mode
// normalisation to a BatchNormSync (parallel/sync_batchnorm.h takes the
// statistics over a process group's whole batch); nn itself never
// communicates.
// Thread safety: forward in training mode writes the buffers: one thread per
// instance (see module.h on replicas).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cohort/nn/module.h"

namespace cohort::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

class BatchNormBase;

// Computes training-mode forwards of a batch norm whose batch is spread over
// several processes (nn knows no process group: parallel/ implements this).
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  // What batch_norm(x, bn's buffers and parameters, training = true,
  // momentum, eps) does, over the whole batch: returns the output with its
  // backward and updates the running buffers, when defined, in place.
  // `input_error` is bn's own input check's message for x on this process
  // ("" when x fits), passed on so that every process can fail together
  // instead of leaving the others waiting.
  virtual Tensor forward(const BatchNormBase& bn, const Tensor& x, const std::string& input_error,
                         double momentum) = 0;
};

// Shared implementation; use BatchNorm1d or BatchNorm2d.
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  // Training-mode forwards go to `sync` (null: this process's batch alone,
  // the default). Eval-mode forwards never do. Copies (clone, replicate)
  // share it.
  void set_sync(std::shared_ptr<BatchNormSync> sync) { sync_ = std::move(sync); }
  const std::shared_ptr<BatchNormSync>& sync() const { return sync_; }

  int64_t num_features() const { return num_features_; }
  const BatchNormOptions& options() const { return options_; }
  Tensor weight() const { return options_.affine ? param(0) : Tensor(); }
  Tensor bias() const { return options_.affine ? param(1) : Tensor(); }
  Tensor running_mean() const { return options_.track_running_stats ? buf(0) : Tensor(); }
  Tensor running_var() const { return options_.track_running_stats ? buf(1) : Tensor(); }
  Tensor num_batches_tracked() const { return options_.track_running_stats ? buf(2) : Tensor(); }

 protected:
  BatchNormBase(std::string type_name, int64_t num_features, const BatchNormOptions& options);
  virtual void check_input(const Tensor& x) const = 0;

 private:
  int64_t num_features_;
  BatchNormOptions options_;
  std::shared_ptr<BatchNormSync> sync_;
};

class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, const BatchNormOptions& options = {})
      : BatchNormBase("BatchNorm1d", num_features, options) {}

 protected:
  ModulePtr copy_shell() const override { return std::make_shared<BatchNorm1d>(*this); }
  void check_input(const Tensor& x) const override;
};

class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNormOptions& options = {})
      : BatchNormBase("BatchNorm2d", num_features, options) {}

 protected:
  ModulePtr copy_shell() const override { return std::make_shared<BatchNorm2d>(*this); }
  void check_input(const Tensor& x) const override;
};

}  // namespace cohort::nn
