#include <algorithm>
#include <cmath>

#include "cohort/autograd/ops.h"
#include "cohort/base/error.h"
#include "cohort/parallel/comm_hooks/allreduce_hook.h"
#include "cohort/parallel/comm_hooks/powersgd_hook.h"

namespace cohort::parallel {

std::string BatchedPowerSGDHook::name() const {
  return fmt::format("batched_powersgd:{}", state_.options().matrix_approximation_rank);
}

BucketFuture BatchedPowerSGDHook::run(distributed::ProcessGroup& pg, GradBucket& bucket) {
  PowerSGDState& s = state_;
  const PowerSGDOptions& o = s.options_;
  if (s.iter_ < o.start_powerSGD_iter) {
    s.maybe_increase_iter(bucket);
    return {allreduce_average(pg, bucket.buffer)};
  }
  Tensor input = bucket.buffer;
  const DType dtype = input.dtype();
  if ((dtype != DType::kFloat32 && dtype != DType::kFloat64) || !input.device().is_cpu())
    throw NotSupported(fmt::format("{}: compresses float32 or float64 CPU buckets, not {}", name(),
                                   dtype_name(dtype)));
  const size_t index = bucket.index;
  const int64_t total = input.numel();
  auto side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(total))));
  while (side * side < total) ++side;
  while (side > 0 && (side - 1) * (side - 1) >= total) --side;
  // PyTorch keeps r even above the side; a column past it could only be zero.
  const int64_t r = std::max<int64_t>(1, std::min(side, o.matrix_approximation_rank));
  s.before_ += total;
  s.after_ += side * r * 2;

  // PyTorch resizes the bucket in place; a padded copy does the same.
  Tensor padded = Tensor::zeros({side * side}, dtype);
  padded.narrow(0, 0, total).copy_(input);
  Tensor before;
  if (o.use_error_feedback) {
    Tensor& error = s.error_[index];
    if (error.defined()) {
      padded.add_(error);
    } else {
      error = Tensor::zeros({side * side}, dtype);
    }
    before = padded.clone();
  }
  Tensor matrix = padded.view({side, side});
  if (!o.warm_start || s.p_.count(index) == 0) {
    s.p_[index] = Tensor::zeros({side, r}, dtype);
    Generator gen(s.next_seed());
    s.q_[index] = randn({side, r}, gen, dtype);
  }
  Tensor p = s.p_[index], q = s.q_[index];
  orthogonalize(q, o.orthogonalization_epsilon);
  p.copy_(matmul(matrix, q));
  distributed::Work p_work =
      pg.all_reduce(p, {.op = distributed::ReduceOp::kSum}, distributed::async_op);

  const double inv_size = 1.0 / pg.size();
  BucketReduction first{p_work,
                        [p, eps = o.orthogonalization_epsilon]() mutable { orthogonalize(p, eps); },
                        p.nbytes()};
  auto second = [this, &pg, index, input, padded, matrix, before, p, q, total, inv_size,
                 is_last = bucket.is_last]() mutable {
    q.copy_(matmul(matrix.transpose(0, 1), p));
    distributed::Work q_work =
        pg.all_reduce(q, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
    return BucketReduction{
        q_work,
        [this, index, input, padded, matrix, before, p, q, total, inv_size, is_last]() mutable {
          q.mul_(inv_size);
          matrix.copy_(matmul(p, q.transpose(0, 1)));
          PowerSGDState& st = state_;
          if (st.options_.use_error_feedback) st.error_[index] = before.sub_(padded);
          if (!st.options_.warm_start) {
            st.p_.clear();
            st.q_.clear();
          }
          input.copy_(padded.narrow(0, 0, total));
          if (is_last) ++st.iter_;
        },
        q.nbytes()};
  };
  return {std::move(first), std::move(second)};
}

std::shared_ptr<BatchedPowerSGDHook> batched_powersgd_hook(PowerSGDOptions options) {
  return std::make_shared<BatchedPowerSGDHook>(options);
}

}  // namespace cohort::parallel
