#include "cohort/autograd/precision.h"

#include "cohort/base/error.h"

namespace cohort {
namespace {
thread_local PrecisionPolicy t_policy;
}  // namespace

const char* precision_name(ComputePrecision precision) {
  return precision == ComputePrecision::kBFloat16 ? "bf16" : "fp32";
}

ComputePrecision parse_precision(std::string_view name) {
  if (name == "fp32" || name == "float32") return ComputePrecision::kFloat32;
  if (name == "bf16" || name == "bfloat16") return ComputePrecision::kBFloat16;
  throw InvalidArgument(fmt::format("precision: unknown name \"{}\" (choices: fp32, bf16)", name));
}

PrecisionPolicy PrecisionPolicy::bf16() { return bf16(native::best_bf16_path()); }

const PrecisionPolicy& current_precision() { return t_policy; }

PrecisionScope::PrecisionScope(const PrecisionPolicy& policy) : saved_(t_policy) {
  if (policy.is_bf16()) native::check_bf16_path(policy.bf16_path, "PrecisionScope");
  t_policy = policy;
}

PrecisionScope::~PrecisionScope() { t_policy = saved_; }

bool bf16_operands(std::initializer_list<Tensor> operands) {
  if (!t_policy.is_bf16()) return false;
  for (const Tensor& t : operands)
    if (t.defined() && t.dtype() != kFloat32) return false;
  return true;
}

}  // namespace cohort
