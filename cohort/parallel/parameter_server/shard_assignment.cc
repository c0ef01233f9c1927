#include "cohort/parallel/parameter_server/shard_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "cohort/base/error.h"

namespace cohort::parallel {

size_t ShardAssignment::max_bytes() const {
  return bytes_of.empty() ? 0 : *std::max_element(bytes_of.begin(), bytes_of.end());
}

size_t ShardAssignment::total_bytes() const {
  return std::accumulate(bytes_of.begin(), bytes_of.end(), size_t{0});
}

ShardAssignment assign_shards(const std::vector<size_t>& param_bytes, int num_servers) {
  COHORT_CHECK(num_servers >= 1, "assign_shards: num_servers must be >= 1, got {}", num_servers);
  const size_t n = param_bytes.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  // stable_sort keeps equal sizes in index order: the tie rule every process applies.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return param_bytes[a] > param_bytes[b]; });
  ShardAssignment a;
  a.server_of.assign(n, -1);
  a.params_of.resize(static_cast<size_t>(num_servers));
  a.bytes_of.assign(static_cast<size_t>(num_servers), 0);
  for (size_t i : order) {
    // min_element returns the first minimum: the lower server index wins ties.
    auto lightest = std::min_element(a.bytes_of.begin(), a.bytes_of.end());
    const int s = static_cast<int>(lightest - a.bytes_of.begin());
    a.server_of[i] = s;
    a.params_of[static_cast<size_t>(s)].push_back(i);
    *lightest += param_bytes[i];
  }
  for (auto& list : a.params_of) std::sort(list.begin(), list.end());
  return a;
}

ShardAssignment assign_shards(const nn::NamedTensors& params, int num_servers) {
  std::vector<size_t> bytes;
  bytes.reserve(params.size());
  for (const auto& [name, t] : params) bytes.push_back(t.nbytes());
  return assign_shards(bytes, num_servers);
}

std::string describe(const ShardAssignment& a, const nn::NamedTensors& params) {
  std::string out;
  for (int s = 0; s < a.num_servers(); ++s) {
    const auto& list = a.params_of[static_cast<size_t>(s)];
    if (!out.empty()) out += "; ";
    out += fmt::format("server {}: {} tensors, {:.1f} KB (", s, list.size(),
                       static_cast<double>(a.bytes_of[static_cast<size_t>(s)]) / 1e3);
    for (size_t k = 0; k < list.size(); ++k) {
      if (k > 0) out += ", ";
      out += list[k] < params.size() ? params[list[k]].first : std::to_string(list[k]);
    }
    out += ")";
  }
  return out;
}

}  // namespace cohort::parallel
