#include "cohort/parallel/comm_hooks/powersgd_hook.h"

#include <algorithm>

#include "cohort/autograd/ops.h"
#include "cohort/base/error.h"
#include "cohort/parallel/comm_hooks/allreduce_hook.h"

namespace cohort::parallel {

namespace {

// One compressed gradient: M ~ P Q^T, P and Q views into the bucket's flat
// P and Q memories (one collective each).
struct Factor {
  Tensor matrix;  // [n, m], the gradient's view into the bucket
  Tensor p;       // [n, r]
  Tensor q;       // [m, r]
};

void check_compressible(const Tensor& buffer, const std::string& hook) {
  if ((buffer.dtype() != DType::kFloat32 && buffer.dtype() != DType::kFloat64) ||
      !buffer.device().is_cpu())
    throw NotSupported(fmt::format("{}: compresses float32 or float64 CPU buckets, not {} on {}",
                                   hook, dtype_name(buffer.dtype()), buffer.device().str()));
}

distributed::Work sum_async(distributed::ProcessGroup& pg, Tensor& t) {
  return pg.all_reduce(t, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
}

}  // namespace

std::string PowerSGDHook::name() const {
  return fmt::format("powersgd:{}", state_.options().matrix_approximation_rank);
}

BucketFuture PowerSGDHook::run(distributed::ProcessGroup& pg, GradBucket& bucket) {
  PowerSGDState& s = state_;
  const PowerSGDOptions& o = s.options_;
  if (s.iter_ < o.start_powerSGD_iter) {
    s.maybe_increase_iter(bucket);
    return {allreduce_average(pg, bucket.buffer)};
  }
  Tensor input = bucket.buffer;
  check_compressible(input, name());
  const size_t index = bucket.index;
  const DType dtype = input.dtype();
  Tensor before;  // the gradient compression starts from, for error feedback
  if (o.use_error_feedback) {
    Tensor& error = s.error_[index];
    if (error.defined()) {
      input.add_(error);
    } else {
      error = zeros_like(input);
    }
    before = input.clone();
  }

  std::vector<Factor> factors;
  std::vector<Tensor> plain;
  int64_t p_numel = 0, q_numel = 0;
  for (const GradBucketParam& gp : bucket.params) {
    const Tensor& g = gp.gradient;
    const int64_t n = g.dim() == 0 ? 1 : g.size(0);
    const int64_t m = n == 0 ? 0 : g.numel() / n;
    const int64_t r = std::min({n, m, o.matrix_approximation_rank});
    const int64_t full = n * m, low_rank = (n + m) * r;
    s.before_ += full;
    if (static_cast<double>(low_rank) * o.min_compression_rate < static_cast<double>(full)) {
      factors.push_back({g.view({n, m}), Tensor(), Tensor()});
      p_numel += n * r;
      q_numel += m * r;
      s.after_ += low_rank;
    } else {
      plain.push_back(g);
      s.after_ += full;
    }
  }

  // The plain tensors first, so that their all_reduce overlaps computing P.
  Tensor flat;
  distributed::Work plain_work;
  if (!plain.empty()) {
    std::vector<Tensor> parts;
    for (const Tensor& t : plain) parts.push_back(t.reshape({-1}));
    flat = cat(parts);
    plain_work = sum_async(pg, flat);
  }

  const bool fresh = !o.warm_start || s.p_.count(index) == 0;
  if (fresh) {
    s.p_[index] = Tensor::zeros({p_numel}, dtype);
    s.q_[index] = Tensor::zeros({q_numel}, dtype);
  }
  Tensor p_all = s.p_[index], q_all = s.q_[index];
  int64_t p_at = 0, q_at = 0;
  for (Factor& f : factors) {
    const int64_t n = f.matrix.size(0), m = f.matrix.size(1);
    const int64_t r = std::min({n, m, o.matrix_approximation_rank});
    f.p = p_all.narrow(0, p_at, n * r).view({n, r});
    f.q = q_all.narrow(0, q_at, m * r).view({m, r});
    p_at += n * r;
    q_at += m * r;
  }
  if (fresh) {
    // The same seed on every rank (the states advance together), a new one
    // at every fresh start.
    Generator gen(s.next_seed());
    for (Factor& f : factors) f.q.copy_(randn(f.q.sizes(), gen, dtype));
  }
  for (Factor& f : factors) {
    orthogonalize(f.q, o.orthogonalization_epsilon);
    f.p.copy_(matmul(f.matrix, f.q));
  }

  const double inv_size = 1.0 / pg.size();
  auto unpack_plain = [flat, plain, inv_size]() mutable {
    if (plain.empty()) return;
    flat.mul_(inv_size);
    int64_t at = 0;
    for (Tensor& t : plain) {
      t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
      at += t.numel();
    }
  };
  // The bucket's last step: remember what compression lost, move on.
  auto end_bucket = [this, index, input, before, is_last = bucket.is_last]() mutable {
    PowerSGDState& st = state_;
    if (st.options_.use_error_feedback) st.error_[index] = before.sub_(input);
    if (!st.options_.warm_start) {
      st.p_.clear();
      st.q_.clear();
    }
    if (is_last) ++st.iter_;
  };

  const size_t plain_bytes = flat.defined() ? flat.nbytes() : 0;
  if (factors.empty()) {
    return {BucketReduction{plain_work,
                            [unpack_plain, end_bucket]() mutable {
                              unpack_plain();
                              end_bucket();
                            },
                            plain_bytes}};
  }
  distributed::Work p_work = sum_async(pg, p_all);
  BucketReduction first{
      p_work,
      [plain_work, unpack_plain, factors, eps = o.orthogonalization_epsilon]() mutable {
        // Started before P's on the same group: done already.
        if (plain_work.defined()) plain_work.wait();
        unpack_plain();
        for (Factor& f : factors) orthogonalize(f.p, eps);
      },
      plain_bytes + p_all.nbytes()};
  auto second = [&pg, factors, q_all, inv_size, end_bucket]() mutable {
    for (Factor& f : factors) f.q.copy_(matmul(f.matrix.transpose(0, 1), f.p));
    distributed::Work q_work = sum_async(pg, q_all);
    return BucketReduction{q_work,
                           [factors, q_all, inv_size, end_bucket]() mutable {
                             q_all.mul_(inv_size);
                             for (Factor& f : factors)
                               f.matrix.copy_(matmul(f.p, f.q.transpose(0, 1)));
                             end_bucket();
                           },
                           q_all.nbytes()};
  };
  return {std::move(first), std::move(second)};
}

std::shared_ptr<PowerSGDHook> powersgd_hook(PowerSGDOptions options) {
  return std::make_shared<PowerSGDHook>(options);
}

}  // namespace cohort::parallel
