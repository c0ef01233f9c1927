#include "cohort/optim/device_update.h"

namespace cohort::optim {

Tensor state_on(TensorDict& st, const char* key, const Tensor& p) {
  Tensor t = st.at(key);
  if (t.device() != p.device()) {
    t = t.to(p.device()).contiguous();
    st.insert_or_assign(key, t);
  }
  return t;
}

void DeviceUpdates::add(const Tensor& p, const Tensor& grad, std::initializer_list<Tensor> state) {
  COHORT_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64,
               "{}: only float32 and float64 parameters are supported, got {}", optimizer_,
               dtype_name(p.dtype()));
  COHORT_CHECK(grad.sizes() == p.sizes(), "{}: gradient shape {} does not match parameter shape {}",
               optimizer_, shape_str(grad.sizes()), shape_str(p.sizes()));
  params_.push_back(p);
  work_.push_back(p.is_contiguous() ? p : p.contiguous());
  grads_.push_back(grad.to(p.dtype()).contiguous());
  size_t k = 0;
  for (const Tensor& t : state) state_[k++].push_back(t);
  for (; k < kMaxState; ++k) state_[k].push_back(Tensor());
}

void DeviceUpdates::finish() {
  for (size_t i = 0; i < params_.size(); ++i)
    if (!work_[i].is_same(params_[i])) Tensor(params_[i]).copy_(work_[i]);
}

}  // namespace cohort::optim
