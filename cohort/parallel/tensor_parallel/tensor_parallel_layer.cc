#include "cohort/parallel/tensor_parallel/tensor_parallel_layer.h"

#include <unordered_set>

namespace cohort::parallel {

namespace {

// Pre-order, as Module::named_parameters: own parameters, then each child's.
void collect(const nn::Module& m, const std::string& prefix,
             std::unordered_set<const TensorImpl*>& seen, std::vector<ParameterLayout>& out) {
  const auto* layer = dynamic_cast<const TensorParallelLayer*>(&m);
  for (const auto& [name, t] : m.named_parameters(/*recurse=*/false)) {
    if (!seen.insert(t.unsafe_impl()).second) continue;
    out.push_back({prefix + name, t, layer ? layer->split_dim(name) : kReplicated,
                   layer ? layer->split_blocks(name) : 1, layer});
  }
  for (const auto& [name, child] : m.named_children())
    collect(*child, prefix + name + ".", seen, out);
}

}  // namespace

std::vector<ParameterLayout> parameter_layouts(const nn::Module& model) {
  std::unordered_set<const TensorImpl*> seen;
  std::vector<ParameterLayout> out;
  collect(model, "", seen, out);
  return out;
}

}  // namespace cohort::parallel
