// The per-shape plans of conv2d.cc: cuDNN's descriptors of a convolution and
// the algorithm chosen for each direction, built and searched on the first
// call of a shape and reused after (cached per thread, bounded), keyed by
// ConvKey.
// Thread safety: the cache is the calling thread's.
#pragma once

#include <cstdint>

#include "cohort/core/device.h"
#include "cohort/core/dtype.h"
#include "cohort/core/kernels/conv2d.h"
#include "cohort/cuda/plan_cache.h"

namespace cohort::cuda {

enum class ConvDirection : int64_t { kForward, kBackwardData, kBackwardFilter, kBackwardBias };

// What the descriptors and cuDNN's choice depend on. Only int64_t fields.
// Dilation and groups are those conv2d has (1 and 1) and stay in the key so
// that a convolution that gains them cannot reuse another's plan.
struct ConvKey {
  int64_t batch, in_channels, in_h, in_w, out_channels, kernel_h, kernel_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
  int64_t dtype, tf32, device, direction;
  int64_t alignment;  // the operands' least address alignment, capped at 16 bytes
  bool operator==(const ConvKey&) const = default;
};

// alignment: of the operands' addresses (the least), capped at 16.
ConvKey conv_key(const kernels::Conv2dGeometry& g, DType dtype, Device device, bool allow_tf32,
                 ConvDirection direction, int64_t alignment);

// The calling thread's conv2d plan cache's counts.
PlanCacheStats conv2d_plan_cache_stats();
inline constexpr size_t kConvPlanCacheCapacity = 128;

}  // namespace cohort::cuda
