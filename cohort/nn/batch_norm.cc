#include "cohort/nn/batch_norm.h"

#include "cohort/autograd/grad_mode.h"

namespace cohort::nn {

BatchNormBase::BatchNormBase(std::string type_name, int64_t num_features,
                             const BatchNormOptions& options)
    : Module(std::move(type_name)), num_features_(num_features), options_(options) {
  COHORT_CHECK(num_features > 0, "{}: num_features must be positive, got {}", this->type_name(),
               num_features);
  COHORT_CHECK(!options.momentum || (*options.momentum >= 0 && *options.momentum <= 1),
               "{}: momentum must be in [0, 1], got {}", this->type_name(),
               options.momentum.value_or(0));
  if (options_.affine) {
    register_parameter("weight", Tensor::ones({num_features}));
    register_parameter("bias", Tensor::zeros({num_features}));
  }
  if (options_.track_running_stats) {
    register_buffer("running_mean", Tensor::zeros({num_features}));
    register_buffer("running_var", Tensor::ones({num_features}));
    register_buffer("num_batches_tracked", Tensor::scalar(0, kInt64));
  }
}

std::string BatchNormBase::extra_repr() const {
  return fmt::format(
      "{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features_, options_.eps,
      options_.momentum ? fmt::format("{}", *options_.momentum) : "None",
      options_.affine ? "True" : "False", options_.track_running_stats ? "True" : "False");
}

Tensor BatchNormBase::forward(const Tensor& x) {
  const bool synced = sync_ != nullptr && is_training();
  // A synced forward hands a bad input to the sync, which fails every
  // process at once (a throw here would leave the others waiting).
  std::string input_error;
  if (synced) {
    try {
      check_input(x);
    } catch (const InvalidArgument& e) {
      input_error = e.what();
    }
  } else {
    check_input(x);
  }
  bool use_batch_stats = is_training() || !options_.track_running_stats;
  if (use_batch_stats && !synced) {
    int64_t per_channel = x.numel() / num_features_;
    COHORT_CHECK(per_channel > 1,
                 "{}: expected more than 1 value per channel when training, got input {}",
                 describe(), shape_str(x.sizes()));
  }
  double momentum = options_.momentum.value_or(0.0);
  Tensor rm, rv;
  if (options_.track_running_stats) {
    rm = buf(0);
    rv = buf(1);
    if (is_training()) {
      Tensor& count = buf(2);
      int64_t n = count.item<int64_t>() + 1;
      {
        NoGradGuard g;
        count.fill_(static_cast<double>(n));
      }
      if (!options_.momentum) momentum = 1.0 / static_cast<double>(n);
    }
  }
  if (synced) return sync_->forward(*this, x, input_error, momentum);
  // In eval mode with running stats the op normalises with rm/rv; in training
  // it updates them in place.
  return batch_norm(x, rm, rv, weight(), bias(), use_batch_stats, momentum, options_.eps);
}

void BatchNorm1d::check_input(const Tensor& x) const {
  COHORT_CHECK((x.dim() == 2 || x.dim() == 3) && x.size(1) == num_features(),
               "{}: input must be [N, {}] or [N, {}, L], got {}", describe(), num_features(),
               num_features(), shape_str(x.sizes()));
}

void BatchNorm2d::check_input(const Tensor& x) const {
  COHORT_CHECK(x.dim() == 4 && x.size(1) == num_features(),
               "{}: input must be [N, {}, H, W], got {}", describe(), num_features(),
               shape_str(x.sizes()));
}

}  // namespace cohort::nn
