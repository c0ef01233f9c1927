#include "cohort/parallel/model_check.h"

#include <algorithm>
#include <cstring>

namespace cohort::parallel {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<std::string> split_lines(const char* p, size_t n) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < n && p[i] != '\0'; ++i) {
    if (p[i] == '\n') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += p[i];
    }
  }
  return out;
}

// Rethrows a failed collective with `what` and this rank in front, keeping its type.
[[noreturn]] void rethrow_with(const std::string& what, int rank, const std::string& step) {
  std::rethrow_exception(distributed::detail::with_context(
      std::current_exception(), fmt::format("{} (rank {}): {} failed", what, rank, step)));
}

bool ignored(const IgnoredNames& ignore, const std::string& name) {
  return std::find(ignore.begin(), ignore.end(), name) != ignore.end();
}

}  // namespace

Device exchange_device(const distributed::ProcessGroup& pg, Device model_device) {
  return pg.backend() == distributed::BackendKind::kNccl ? model_device : kCPU;
}

Device module_device(const nn::Module& module) {
  for (const Tensor& p : module.parameters()) return p.device();
  return kCPU;
}

std::vector<std::string> model_entries(const nn::Module& module, const IgnoredNames& ignore) {
  std::vector<std::string> out;
  for (const auto& [name, t] : module.named_parameters()) {
    if (ignored(ignore, name)) continue;
    out.push_back(
        fmt::format("parameter '{}' {} {}", name, dtype_name(t.dtype()), shape_str(t.sizes())));
  }
  for (const auto& [name, t] : module.named_buffers())
    if (!ignored(ignore, name))
      out.push_back(
          fmt::format("buffer '{}' {} {}", name, dtype_name(t.dtype()), shape_str(t.sizes())));
  return out;
}

void verify_same_model(distributed::ProcessGroup& pg, const nn::Module& module,
                       const std::string& what, const IgnoredNames& ignore) {
  verify_same_entries(pg, model_entries(module, ignore), what, module_device(module));
}

void verify_same_entries(distributed::ProcessGroup& pg, const std::vector<std::string>& entries,
                         const std::string& what, Device device) {
  const Device on = exchange_device(pg, device);
  const int n = pg.size();
  const int rank = pg.rank();
  std::string blob;
  for (const auto& e : entries) blob += e + "\n";
  std::vector<int64_t> mine = {static_cast<int64_t>(entries.size()),
                               static_cast<int64_t>(fnv1a(blob)),
                               static_cast<int64_t>(blob.size())};
  Tensor in = Tensor::from_vector(mine).to(on);
  Tensor all = Tensor::zeros({n * 3}, DType::kInt64, on);
  try {
    pg.all_gather_into_tensor(all, in);
  } catch (...) {
    rethrow_with(what, rank, "checking that every rank wraps the same model (all_gather)");
  }
  std::vector<int64_t> v = all.cpu().to_vector<int64_t>();
  bool same = true;
  int64_t max_len = 0;
  for (int r = 0; r < n; ++r) {
    same = same && v[3 * r] == v[0] && v[3 * r + 1] == v[1];
    max_len = std::max(max_len, v[3 * r + 2]);
  }
  if (same) return;
  // The summaries differ: gather the full lists (every rank takes this branch,
  // since every rank saw the same hashes) to name the first difference.
  Tensor text = Tensor::zeros({max_len + 1}, DType::kUInt8);
  std::memcpy(text.raw_data(), blob.data(), blob.size());
  text = text.to(on);
  Tensor texts = Tensor::zeros({n * (max_len + 1)}, DType::kUInt8, on);
  try {
    pg.all_gather_into_tensor(texts, text);
  } catch (...) {
    rethrow_with(what, rank, "gathering the model descriptions of the ranks");
  }
  texts = texts.cpu();
  const char* base = static_cast<const char*>(texts.raw_data());
  std::vector<std::string> ref = split_lines(base, static_cast<size_t>(max_len + 1));
  std::string first;
  std::vector<int> differing;
  for (int r = 1; r < n; ++r) {
    std::vector<std::string> other =
        split_lines(base + r * (max_len + 1), static_cast<size_t>(max_len + 1));
    if (other == ref) continue;
    differing.push_back(r);
    if (!first.empty()) continue;
    size_t k = 0;
    while (k < ref.size() && k < other.size() && ref[k] == other[k]) ++k;
    if (k < ref.size() && k < other.size()) {
      first = fmt::format("entry #{}: rank 0 has {}, rank {} has {}", k, ref[k], r, other[k]);
    } else if (k < ref.size()) {
      first = fmt::format("rank 0 has {} entries, rank {} only {}; first missing on rank {}: {}",
                          ref.size(), r, other.size(), r, ref[k]);
    } else {
      first = fmt::format("rank 0 has {} entries, rank {} has {}; first extra on rank {}: {}",
                          ref.size(), r, other.size(), r, other[k]);
    }
  }
  std::string ranks;
  for (int r : differing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  throw InvalidArgument(fmt::format(
      "{} (rank {}): the ranks wrap different models (rank 0 differs from rank(s) {}): {}", what,
      rank, ranks, first.empty() ? "same entries, different hash" : first));
}

void broadcast_module_state(distributed::ProcessGroup& pg, const nn::Module& module, int root,
                            const IgnoredNames& ignore) {
  if (pg.size() == 1) return;
  std::vector<Tensor> tensors;
  for (auto& [name, t] : module.named_parameters())
    if (!ignored(ignore, name)) tensors.push_back(t);
  for (auto& [name, t] : module.named_buffers())
    if (!ignored(ignore, name)) tensors.push_back(t);
  std::vector<distributed::Work> works;
  std::vector<std::pair<Tensor, Tensor>> copies;
  for (Tensor& t : tensors) {
    Tensor target = t.is_contiguous() ? t.detach() : t.contiguous();
    works.push_back(pg.broadcast(target, {.root = root}, distributed::async_op));
    if (!t.is_contiguous()) copies.emplace_back(t, target);
  }
  try {
    for (auto& w : works) w.wait();
  } catch (...) {
    rethrow_with("DistributedDataParallel", pg.rank(),
                 fmt::format("broadcasting the parameters and buffers from rank {}", root));
  }
  for (auto& [t, c] : copies) t.detach().copy_(c);
}

}  // namespace cohort::parallel
