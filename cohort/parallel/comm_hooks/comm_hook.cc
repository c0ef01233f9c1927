#include "cohort/parallel/comm_hooks/comm_hook.h"

#include <fmt/format.h>

#include "cohort/base/error.h"

namespace cohort::parallel {

std::vector<Tensor> GradBucket::gradients() const {
  std::vector<Tensor> out;
  out.reserve(params.size());
  for (const GradBucketParam& p : params) out.push_back(p.gradient);
  return out;
}

std::vector<Tensor> GradBucket::parameters() const {
  std::vector<Tensor> out;
  out.reserve(params.size());
  for (const GradBucketParam& p : params) out.push_back(p.parameter);
  return out;
}

BucketReduction chain_stages(BucketFuture future, std::function<void(BucketReduction)> post) {
  BucketReduction r = std::move(future.reduction);
  if (!future.then) return r;
  r.finish = [finish = std::move(r.finish), then = std::move(future.then), post = std::move(post)] {
    if (finish) finish();
    post(then());
  };
  return r;
}

void throw_hook_registered_twice(const std::string& what, const CommHook& first,
                                 const CommHook& second) {
  throw InvalidArgument(fmt::format(
      "{}: register_comm_hook can only be called once (as PyTorch's register_comm_hook or "
      "register_builtin_comm_hook): a hook ('{}') is registered already, refusing '{}'. A hook "
      "given in the options (comm_hook, reduce_dtype) counts as the registration",
      what, first.name(), second.name()));
}

}  // namespace cohort::parallel
