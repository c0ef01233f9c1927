#include "cohort/optim/update_util.h"

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

}  // namespace cohort::optim
