#include "cohort/parallel/tensor_parallel/full_state_dict.h"

#include <map>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/parallel/tensor_parallel/mappings.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_layer.h"

namespace cohort::parallel {

namespace {

struct Split {
  int64_t dim = kReplicated;
  int64_t blocks = 1;
};

// Every state key of a sharded parameter, under each name it is registered
// (a tied head's weight too, which parameter_layouts lists once).
void collect_sharded(const nn::Module& m, const std::string& prefix,
                     const distributed::ProcessGroup& tp, const char* op,
                     std::map<std::string, Split, std::less<>>& out) {
  if (const auto* layer = dynamic_cast<const TensorParallelLayer*>(&m)) {
    for (const auto& [name, t] : m.named_parameters(/*recurse=*/false)) {
      const int64_t dim = layer->split_dim(name);
      if (dim == kReplicated) continue;
      COHORT_CHECK(layer->tensor_parallel_group().get() == &tp,
                   "{} (rank {} of group {}): parameter '{}' is split over group {}, not over "
                   "the group passed",
                   op, tp.rank(), tp.name(), prefix + name, layer->tensor_parallel_group()->name());
      out.emplace(prefix + name, Split{dim, layer->split_blocks(name)});
    }
  }
  for (const auto& [name, child] : m.named_children())
    collect_sharded(*child, prefix + name + ".", tp, op, out);
}

// Split dims of the model's sharded parameters by key, after checking that
// each is split over tp (another group would gather the wrong pieces).
std::map<std::string, Split, std::less<>> sharded_keys(const nn::Module& model,
                                                       const distributed::ProcessGroup& tp,
                                                       const char* op) {
  std::map<std::string, Split, std::less<>> out;
  collect_sharded(model, "", tp, op, out);
  return out;
}

}  // namespace

TensorDict full_state_dict(const nn::Module& model, distributed::ProcessGroup& tp) {
  const auto sharded = sharded_keys(model, tp, "full_state_dict");
  TensorDict out;
  for (const auto& [key, t] : model.state_dict()) {
    auto it = sharded.find(key);
    out.insert(key, it == sharded.end()
                        ? t.clone()
                        : all_gather_along_dim(t, it->second.dim, tp, it->second.blocks));
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
    if (it != sharded.end()) want[static_cast<size_t>(it->second.dim)] *= tp.size();
    COHORT_CHECK(f->sizes() == want,
                 "load_full_state_dict (rank {} of group {}): '{}' has shape {} in the dict, but "
                 "the full model's is {}{}",
                 tp.rank(), tp.name(), key, shape_str(f->sizes()), shape_str(want),
                 it == sharded.end()
                     ? ""
                     : fmt::format(" (split along dim {} into {} shards of {})", it->second.dim,
                                   tp.size(), shape_str(t.sizes())));
    local.insert(key, it == sharded.end() ? *f
                                          : shard_along_dim(*f, it->second.dim, tp.rank(),
                                                            tp.size(), it->second.blocks));
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
