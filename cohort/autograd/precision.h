// Precision policy: which ops compute in bfloat16 (mixed precision with
// float32 master weights), as PyTorch's torch.autocast("cpu", bfloat16) but
// explicit: the caller (a training loop, cohort::train::Trainer) opens a
// PrecisionScope with a PrecisionPolicy around forward and backward; nothing
// in the library switches it on behind the caller's back.
//
//   cohort::PrecisionScope bf16(cohort::PrecisionPolicy::bf16());
//   Tensor loss = cross_entropy(model.forward(x), y);
//   loss.backward();  // parameters' .grad are float32
//
// Under kBFloat16, matmul, linear, linear_gelu and linear_gelu_linear (the
// GEMMs) on float32 inputs round their inputs to bfloat16 (nearest even),
// multiply with float32 accumulation (native/linalg_bf16.h, on the policy's
// bf16 path) and return float32. Their backward computes in bf16 as well (the
// incoming gradient is rounded, products accumulate in float32) and gives
// float32 gradients; what the graph keeps for backward are the bf16 copies
// (half the bytes of the float32 activations). Everything else (LayerNorm,
// softmax, GELU's elementwise part, losses, reductions, optimizer) stays
// float32, and so do parameters, gradients and optimizer state (master
// weights). float64 inputs (gradcheck) are never rounded.
// Where this differs from autocast: autocast returns linear's output as a
// bf16 tensor and the pointwise ops that follow run in bf16; here the output
// is the float32 accumulator, unrounded, since the following ops are float32
// ones. The saved activations are bf16 as autocast's.
// Thread safety: the scope is thread-local (like grad mode): each thread
// starts in float32, and a scope affects only ops called on its thread
// (threads a caller starts, e.g. DataParallel replicas, open their own).
// Failure: a policy naming a bf16 path this CPU cannot run throws NotSupported
// (naming the path and the CPU's features) when the scope opens.
#pragma once

#include <initializer_list>
#include <string_view>

#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/tensor.h"

namespace cohort {

enum class ComputePrecision { kFloat32 = 0, kBFloat16 = 1 };

// "fp32", "bf16"; parse_precision also accepts "float32", "bfloat16" and
// throws InvalidArgument naming the choices.
const char* precision_name(ComputePrecision precision);
ComputePrecision parse_precision(std::string_view name);

struct PrecisionPolicy {
  ComputePrecision compute = ComputePrecision::kFloat32;
  native::Bf16Path bf16_path = native::Bf16Path::kEmulated;

  static PrecisionPolicy fp32() { return {}; }
  // bf16 compute on the fastest path this CPU runs (native::best_bf16_path).
  static PrecisionPolicy bf16();
  static PrecisionPolicy bf16(native::Bf16Path path) { return {ComputePrecision::kBFloat16, path}; }
  bool is_bf16() const { return compute == ComputePrecision::kBFloat16; }
};

// The policy in force on this thread (fp32 outside every scope).
const PrecisionPolicy& current_precision();

// Whether an op on these operands computes in bf16: the policy in force is
// bf16 and every defined operand is float32 (float64 ones never round).
bool bf16_operands(std::initializer_list<Tensor> operands);

// RAII: `policy` for this thread until the scope ends, then the previous one.
class PrecisionScope {
 public:
  explicit PrecisionScope(const PrecisionPolicy& policy);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  PrecisionPolicy saved_;
};

}  // namespace cohort
