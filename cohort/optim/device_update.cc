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

void DeviceUpdates::add(const Tensor& p, const Tensor& grad, std::initializer_list<Tensor> state,
                        double extra) {
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
  extras_.push_back(extra);
}

std::vector<std::vector<size_t>> indices_by_device(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<size_t>> groups;
  std::vector<Device> devices;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Device d = tensors[i].device();
    size_t g = 0;
    while (g < devices.size() && devices[g] != d) ++g;
    if (g == devices.size()) {
      devices.push_back(d);
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  return groups;
}

std::vector<DeviceUpdates> DeviceUpdates::by_device() const {
  std::vector<DeviceUpdates> out;
  for (const std::vector<size_t>& group : indices_by_device(params_)) {
    DeviceUpdates& u = out.emplace_back(optimizer_);
    for (size_t i : group) {
      u.params_.push_back(params_[i]);
      u.work_.push_back(work_[i]);
      u.grads_.push_back(grads_[i]);
      for (size_t k = 0; k < kMaxState; ++k) u.state_[k].push_back(state_[k][i]);
      u.extras_.push_back(extras_[i]);
    }
  }
  return out;
}

void DeviceUpdates::finish() const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (!work_[i].is_same(params_[i])) Tensor(params_[i]).copy_(work_[i]);
}

}  // namespace cohort::optim
