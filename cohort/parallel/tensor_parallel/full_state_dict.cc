#include "cohort/parallel/tensor_parallel/full_state_dict.h"

#include <map>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/parallel/tensor_parallel/mappings.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_layer.h"

namespace cohort::parallel {

namespace {

// Split dims of the model's sharded parameters by key, after checking that
// each is split over tp (another group would gather the wrong pieces).
std::map<std::string, int64_t, std::less<>> sharded_keys(const nn::Module& model,
                                                         const distributed::ProcessGroup& tp,
                                                         const char* op) {
  std::map<std::string, int64_t, std::less<>> out;
  for (const ParameterLayout& p : parameter_layouts(model)) {
    if (p.split_dim == kReplicated) continue;
    COHORT_CHECK(p.layer->tensor_parallel_group().get() == &tp,
                 "{} (rank {} of group {}): parameter '{}' is split over group {}, not over the "
                 "group passed",
                 op, tp.rank(), tp.name(), p.name, p.layer->tensor_parallel_group()->name());
    out.emplace(p.name, p.split_dim);
  }
  return out;
}

}  // namespace

TensorDict full_state_dict(const nn::Module& model, distributed::ProcessGroup& tp) {
  const auto sharded = sharded_keys(model, tp, "full_state_dict");
  TensorDict out;
  for (const auto& [key, t] : model.state_dict()) {
    auto it = sharded.find(key);
    out.insert(key, it == sharded.end() ? t.clone() : all_gather_along_dim(t, it->second, tp));
  }
  return out;
}

void load_full_state_dict(nn::Module& model, const TensorDict& full,
                          distributed::ProcessGroup& tp) {
  const auto sharded = sharded_keys(model, tp, "load_full_state_dict");
  const TensorDict own = model.state_dict();
  TensorDict local;
  std::vector<std::string> missing, unexpected;
  for (const auto& [key, t] : own) {
    const Tensor* f = full.find(key);
    if (f == nullptr) {
      missing.push_back(key);
      continue;
    }
    auto it = sharded.find(key);
    Shape want = t.sizes();
    if (it != sharded.end()) want[static_cast<size_t>(it->second)] *= tp.size();
    COHORT_CHECK(f->sizes() == want,
                 "load_full_state_dict (rank {} of group {}): '{}' has shape {} in the dict, but "
                 "the full model's is {}{}",
                 tp.rank(), tp.name(), key, shape_str(f->sizes()), shape_str(want),
                 it == sharded.end() ? ""
                                     : fmt::format(" (split along dim {} into {} shards of {})",
                                                   it->second, tp.size(), shape_str(t.sizes())));
    local.insert(key,
                 it == sharded.end() ? *f : shard_along_dim(*f, it->second, tp.rank(), tp.size()));
  }
  for (const auto& [key, t] : full)
    if (!own.contains(key)) unexpected.push_back(key);
  COHORT_CHECK(
      missing.empty() && unexpected.empty(),
      "load_full_state_dict (rank {} of group {}): missing keys [{}], unexpected keys [{}]",
      tp.rank(), tp.name(), fmt::join(missing, ", "), fmt::join(unexpected, ", "));
  model.load_state_dict(local, /*strict=*/true);
}

}  // namespace cohort::parallel
