// bf16 weights: after each optimizer step, every float32 parameter is rounded
// to the nearest bfloat16 value or stochastically (llm.c's recipe for
// weights kept in bf16; core/native/bf16_rounding.h). It gives the numerics
// of training with bf16 weights, which is what the choice between fp32
// master weights and a bf16-weights mode is decided on ("Revisiting BFloat16
// Training": round-to-nearest loses updates below half a bf16 step,
// stochastic rounding keeps them on average). It does not save memory: the
// parameters stay float32 tensors holding bf16 values, and the optimizer
// state stays float32.
//
// Reproducible: element i of the j-th parameter (in the order given) draws
// with seed mix(seed, step) and offset (elements of parameters 0..j-1) + i,
// so the result depends on the values, the seed and the step only, never on
// threads; data-parallel replicas holding the same parameters round them to
// the same bits and stay identical.
// Thread safety: the caller's training thread; parameters must not be used
// by another thread meanwhile. Failure: a parameter that is not float32
// throws InvalidArgument naming its index and dtype.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::optim {

enum class WeightRounding { kNearest, kStochastic };

// "nearest", "stochastic".
const char* weight_rounding_name(WeightRounding rounding);

// Rounds each parameter's values to bf16 in place (see the header comment).
void round_weights_to_bf16(const std::vector<Tensor>& params, WeightRounding rounding,
                           uint64_t seed, int64_t step);

}  // namespace cohort::optim
