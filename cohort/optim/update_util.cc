#include "cohort/optim/update_util.h"

#include <algorithm>

#include "cohort/base/parallel.h"

namespace cohort::optim {

DenseUpdate::DenseUpdate(const Tensor& param, const Tensor& grad, const char* optimizer)
    : param_(param) {
  COHORT_CHECK(param.dtype() == kFloat32 || param.dtype() == kFloat64,
               "{}: only float32 and float64 parameters are supported, got {}", optimizer,
               dtype_name(param.dtype()));
  COHORT_CHECK(grad.sizes() == param.sizes(),
               "{}: gradient shape {} does not match parameter shape {}", optimizer,
               shape_str(grad.sizes()), shape_str(param.sizes()));
  work_ = param.is_contiguous() ? param : param.contiguous();
  grad_ = grad.to(param.dtype()).contiguous();
}

void DenseUpdate::finish() {
  if (!work_.is_same(param_)) param_.copy_(work_);
}

void UpdateBatch::add(int64_t n, std::function<void(int64_t, int64_t)> loop) {
  if (n <= 0) return;
  ends_.push_back((ends_.empty() ? 0 : ends_.back()) + n);
  loops_.push_back(std::move(loop));
}

void UpdateBatch::run() {
  if (ends_.empty()) return;
  parallel_for(0, ends_.back(), kUpdateGrain, [&](int64_t b, int64_t e) {
    size_t i = std::upper_bound(ends_.begin(), ends_.end(), b) - ends_.begin();
    for (; i < ends_.size() && b < e; ++i) {
      const int64_t start = i == 0 ? 0 : ends_[i - 1];
      const int64_t stop = std::min(e, ends_[i]);
      loops_[i](b - start, stop - start);
      b = stop;
    }
  });
  ends_.clear();
  loops_.clear();
}

}  // namespace cohort::optim
