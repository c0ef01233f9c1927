#include "cohort/parallel/sync_batchnorm.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/native/batch_norm_parts.h"

namespace cohort::parallel {
namespace {

using distributed::DataType;
using distributed::ProcessGroup;

// What one forward call knows beyond the tensors.
struct Call {
  std::string who;          // the layer, for messages
  std::string input_error;  // this rank's input check ("" when x fits)
  int64_t channels = 0;     // C: the all_gather's size depends on it
};

std::string where(const Call& call, const ProcessGroup& group) {
  return fmt::format("{} on rank {} of group '{}' ({} ranks)", call.who, group.rank(), group.name(),
                     group.size());
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// Each rank's share of the all_gather: whether its input fits, its values per
// channel, its input's dims, then C means and C biased variances.
constexpr int64_t kOk = 0, kCount = 1, kDims = 2, kHeader = 3;

// The whole group's statistics, from every rank's record.
struct GlobalStats {
  Tensor mean, invstd, var_unbiased;  // [C] float64
  int64_t count = 0;
};

GlobalStats combine(const std::vector<double>& all, int64_t c, double eps, const Call& call,
                    const ProcessGroup& group, const Shape& local_shape) {
  const int64_t stride = kHeader + 2 * c;
  const int ranks = group.size();
  auto rec = [&](int r) { return all.data() + r * stride; };
  std::vector<int> bad;
  for (int r = 0; r < ranks; ++r)
    if (rec(r)[kOk] == 0) bad.push_back(r);
  if (!call.input_error.empty())
    throw InvalidArgument(fmt::format("{}: {}", where(call, group), call.input_error));
  if (!bad.empty())
    throw InvalidArgument(fmt::format(
        "{}: the input of rank(s) {} does not fit this layer (their errors say how); this "
        "rank's is {}",
        where(call, group), rank_list(bad), shape_str(local_shape)));
  for (int r = 1; r < ranks; ++r) {
    if (rec(r)[kDims] != rec(0)[kDims]) {
      std::string dims;
      for (int q = 0; q < ranks; ++q)
        dims +=
            fmt::format("{}rank {}: {}-D", q ? ", " : "", q, static_cast<int64_t>(rec(q)[kDims]));
      throw InvalidArgument(fmt::format(
          "{}: the ranks' inputs differ in dims ({}); every rank must give the same [N, C, *] "
          "layout",
          where(call, group), dims));
    }
  }
  GlobalStats g;
  std::string counts;
  for (int r = 0; r < ranks; ++r) {
    g.count += static_cast<int64_t>(rec(r)[kCount]);
    counts += fmt::format("{}{}", r ? ", " : "", static_cast<int64_t>(rec(r)[kCount]));
  }
  if (g.count == 0)
    throw InvalidArgument(fmt::format(
        "{}: the batch is empty on every rank; training needs more than one value per channel "
        "over the group",
        where(call, group)));
  COHORT_CHECK(g.count > 1,
               "{}: training needs more than one value per channel over the group, got {} "
               "(per rank: [{}])",
               where(call, group), g.count, counts);
  // Chan et al.'s parallel combination: the count-weighted mean, and the
  // sum of squares about it from each rank's variance and mean offset.
  std::vector<double> mean(c, 0.0), m2(c, 0.0);
  const double n = static_cast<double>(g.count);
  for (int r = 0; r < ranks; ++r) {
    const double nr = rec(r)[kCount];
    for (int64_t ch = 0; ch < c; ++ch) mean[ch] += nr * rec(r)[kHeader + ch] / n;
  }
  for (int r = 0; r < ranks; ++r) {
    const double nr = rec(r)[kCount];
    if (nr == 0) continue;
    for (int64_t ch = 0; ch < c; ++ch) {
      const double d = rec(r)[kHeader + ch] - mean[ch];
      m2[ch] += nr * (rec(r)[kHeader + c + ch] + d * d);
    }
  }
  std::vector<double> invstd(c), unbiased(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    invstd[ch] = 1.0 / std::sqrt(m2[ch] / n + eps);
    unbiased[ch] = m2[ch] / (n - 1);
  }
  g.mean = Tensor::from_vector(mean);
  g.invstd = Tensor::from_vector(invstd);
  g.var_unbiased = Tensor::from_vector(unbiased);
  return g;
}

Tensor forward_over_group(const Tensor& x, const Tensor& rm, const Tensor& rv, const Tensor& w,
                          const Tensor& b, double momentum, double eps,
                          const std::shared_ptr<ProcessGroup>& group, const Call& call) {
  COHORT_CHECK(group != nullptr, "{}: the process group is null", call.who);
  ProcessGroup& pg = *group;
  if (pg.size() == 1) {
    if (!call.input_error.empty()) throw InvalidArgument(call.input_error);
    return batch_norm(x, rm, rv, w, b, true, momentum, eps);
  }
  const int64_t c = call.channels;
  const bool fits = call.input_error.empty();
  std::vector<double> mine(kHeader + 2 * c, 0.0);
  native::BatchNormStats local;
  if (fits) {
    local = native::batch_norm_stats(x);
    mine[kOk] = 1;
    mine[kCount] = static_cast<double>(local.count);
    mine[kDims] = static_cast<double>(x.dim());
    const double* pm = local.mean.data_ptr<double>();
    const double* pv = local.var.data_ptr<double>();
    std::copy(pm, pm + c, mine.begin() + kHeader);
    std::copy(pv, pv + c, mine.begin() + kHeader + c);
  }
  std::vector<double> all(mine.size() * static_cast<size_t>(pg.size()));
  try {
    pg.all_gather(mine.data(), all.data(), mine.size(), DataType::kFloat64);
  } catch (const InvalidArgument& e) {
    // A mismatch: the only one this call can make is of sizes, i.e. of C.
    throw InvalidArgument(
        fmt::format("{}: the ranks' statistics differ in size (do their layers have the same "
                    "num_features? here {}): {}",
                    where(call, pg), c, e.what()));
  }
  GlobalStats g = combine(all, c, eps, call, pg, x.defined() ? x.sizes() : Shape{});
  {
    NoGradGuard no_grad;
    // Handles on the caller's buffers: the updates land in them.
    if (rm.defined()) Tensor(rm).mul_(1.0 - momentum).add_(g.mean, momentum);
    if (rv.defined()) Tensor(rv).mul_(1.0 - momentum).add_(g.var_unbiased, momentum);
  }
  Tensor out = native::batch_norm_elemt(x, g.mean, g.invstd, w, b);
  if (!autograd::any_requires_grad({x, w, b})) return out;
  Tensor xd = x.detach(), wd = w.defined() ? w.detach() : Tensor();
  Tensor mean = g.mean, invstd = g.invstd;
  const int64_t count = g.count;
  std::shared_ptr<ProcessGroup> grp = group;
  return autograd::record(
      out, "sync_batch_norm", {x, w, b},
      [=](const Tensor& grad, const std::vector<bool>& needs) {
        native::BatchNormGradSums local_sums =
            native::batch_norm_backward_reduce(grad, xd, mean, invstd);
        std::vector<Tensor> grads(3);
        // This rank's share: DDP (or the caller) sums or averages it.
        if (needs[1]) grads[1] = local_sums.sum_dy_xhat.to(xd.dtype());
        if (needs[2]) grads[2] = local_sums.sum_dy.to(xd.dtype());
        if (needs[0]) {
          std::vector<double> sums = local_sums.sum_dy.to_vector<double>();
          std::vector<double> sx = local_sums.sum_dy_xhat.to_vector<double>();
          sums.insert(sums.end(), sx.begin(), sx.end());
          grp->all_reduce(sums.data(), sums.size(), DataType::kFloat64);
          const auto half = sums.begin() + static_cast<std::ptrdiff_t>(sums.size() / 2);
          Tensor sum_dy = Tensor::from_vector(std::vector<double>(sums.begin(), half));
          Tensor sum_dy_xhat = Tensor::from_vector(std::vector<double>(half, sums.end()));
          grads[0] = native::batch_norm_backward_elemt(grad, xd, mean, invstd, wd, sum_dy,
                                                       sum_dy_xhat, count);
        }
        return grads;
      },
      {xd, wd});
}

// The nn seam: a BatchNorm's training forwards over a group.
class GroupSync final : public nn::BatchNormSync {
 public:
  explicit GroupSync(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}

  Tensor forward(const nn::BatchNormBase& bn, const Tensor& x, const std::string& input_error,
                 double momentum) override {
    std::string error = input_error;
    if (error.empty() && !x.is_cpu())
      error = fmt::format("{}: input must be on the CPU, got {}", bn.describe(), x.device().str());
    Call call{bn.describe(), std::move(error), bn.num_features()};
    return forward_over_group(x, bn.running_mean(), bn.running_var(), bn.weight(), bn.bias(),
                              momentum, bn.options().eps, group_, call);
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
};

std::shared_ptr<nn::BatchNormSync> make_sync(std::shared_ptr<ProcessGroup> group,
                                             const std::string& who) {
  COHORT_CHECK(group != nullptr, "{}: the process group is null", who);
  return std::make_shared<GroupSync>(std::move(group));
}

}  // namespace

SyncBatchNorm::SyncBatchNorm(int64_t num_features, std::shared_ptr<ProcessGroup> group,
                             const nn::BatchNormOptions& options)
    : nn::BatchNormBase("SyncBatchNorm", num_features, options) {
  set_sync(make_sync(std::move(group), describe()));
}

void SyncBatchNorm::check_input(const Tensor& x) const {
  COHORT_CHECK(x.dim() >= 2 && x.size(1) == num_features(), "{}: input must be [N, {}, *], got {}",
               describe(), num_features(), shape_str(x.sizes()));
}

int64_t convert_sync_batchnorm(nn::Module& module, std::shared_ptr<ProcessGroup> group) {
  auto sync = make_sync(std::move(group), "convert_sync_batchnorm");
  int64_t converted = 0;
  for (auto& [name, m] : module.named_modules()) {
    if (auto* bn = dynamic_cast<nn::BatchNormBase*>(m)) {
      bn->set_sync(sync);
      ++converted;
    }
  }
  return converted;
}

Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, double momentum, double eps,
                       const std::shared_ptr<ProcessGroup>& group) {
  Call call{"sync_batch_norm", "", 0};
  auto fits = [&](const Tensor& t) {
    return !t.defined() || (t.dim() == 1 && t.size(0) == x.size(1));
  };
  if (x.dim() >= 2 && x.is_cpu()) {
    call.channels = x.size(1);
    for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
      if (!fits(*t))
        call.input_error =
            fmt::format("sync_batch_norm: parameters and buffers must be [{}] for input {}, got {}",
                        call.channels, shape_str(x.sizes()), shape_str(t->sizes()));
  } else {
    call.input_error =
        fmt::format("sync_batch_norm: input must be [N, C, *] on the CPU, got {} on {}",
                    shape_str(x.sizes()), x.device().str());
    const Tensor& known = weight.defined() ? weight : running_mean;
    call.channels = known.defined() ? known.numel() : 1;
  }
  return forward_over_group(x, running_mean, running_var, weight, bias, momentum, eps, group, call);
}

}  // namespace cohort::parallel
