#include "cohort/parallel/fault_tolerance/state_transfer.h"

#include <cstring>

#include "cohort/base/error.h"

namespace cohort::parallel {

// Header: [entries, name bytes], then per entry [dtype, ndim, dims...], then
// the names concatenated (each prefixed by its length in the int64 part).
void send_state(distributed::ProcessGroup& pg, const TensorDict& state, int dst, Device device) {
  auto send = [&](const Tensor& t) { pg.send(t.to(device).contiguous(), dst); };
  std::vector<int64_t> meta;
  std::string names;
  for (const auto& [name, t] : state) {
    meta.push_back(static_cast<int64_t>(name.size()));
    meta.push_back(static_cast<int64_t>(t.dtype()));
    meta.push_back(static_cast<int64_t>(t.dim()));
    for (int64_t d : t.sizes()) meta.push_back(d);
    names += name;
  }
  Tensor sizes = Tensor::from_vector<int64_t>({static_cast<int64_t>(state.size()),
                                               static_cast<int64_t>(meta.size()),
                                               static_cast<int64_t>(names.size())});
  send(sizes);
  if (!meta.empty()) send(Tensor::from_vector<int64_t>(meta));
  if (!names.empty()) {
    Tensor bytes = Tensor::empty({static_cast<int64_t>(names.size())}, DType::kUInt8);
    std::memcpy(bytes.raw_data(), names.data(), names.size());
    send(bytes);
  }
  for (const auto& [name, t] : state) {
    if (t.numel() == 0) continue;
    send(t);
  }
}

TensorDict recv_state(distributed::ProcessGroup& pg, int src, Device device) {
  auto recv = [&](Shape shape, DType dtype) {
    Tensor t = Tensor::empty(std::move(shape), dtype, device);
    pg.recv(t, src);
    return t.cpu();
  };
  Tensor sizes = recv({3}, DType::kInt64);
  const std::vector<int64_t> n = sizes.to_vector<int64_t>();
  COHORT_CHECK(n[0] >= 0 && n[1] >= 0 && n[2] >= 0,
               "recv_state (rank {}): a malformed header from rank {}", pg.rank(), src);
  std::vector<int64_t> meta(static_cast<size_t>(n[1]));
  if (n[1] > 0) {
    meta = recv({n[1]}, DType::kInt64).to_vector<int64_t>();
  }
  std::string names(static_cast<size_t>(n[2]), '\0');
  if (n[2] > 0) {
    Tensor bytes = recv({n[2]}, DType::kUInt8);
    std::memcpy(names.data(), bytes.raw_data(), names.size());
  }
  TensorDict out;
  size_t m = 0, at = 0;
  for (int64_t e = 0; e < n[0]; ++e) {
    COHORT_CHECK(m + 3 <= meta.size(), "recv_state (rank {}): a truncated header from rank {}",
                 pg.rank(), src);
    const auto len = static_cast<size_t>(meta[m]);
    const auto dtype = static_cast<DType>(meta[m + 1]);
    const auto ndim = static_cast<size_t>(meta[m + 2]);
    m += 3;
    COHORT_CHECK(m + ndim <= meta.size() && at + len <= names.size(),
                 "recv_state (rank {}): a truncated header from rank {}", pg.rank(), src);
    Shape shape(meta.begin() + static_cast<ptrdiff_t>(m),
                meta.begin() + static_cast<ptrdiff_t>(m + ndim));
    m += ndim;
    Tensor t = shape_numel(shape) > 0 ? recv(shape, dtype) : Tensor::empty(shape, dtype);
    out.insert(names.substr(at, len), std::move(t));
    at += len;
  }
  return out;
}

}  // namespace cohort::parallel
