// Gradient buckets: which parameters share a flat bucket and how big a
// bucket may grow, shared by cohort's DistributedDataParallel (reducer.cc)
// and the LibTorch adapter's (cohort/libtorch/distributed_data_parallel.cc),
// so that both group a model's gradients the same way.
//
// assign_buckets: parameters in reverse registration order (about the order
// backward produces their gradients), one open bucket per dtype, a bucket
// closed when the next parameter would take it past cap_bytes (a single
// larger parameter gets a bucket of its own); the buckets ordered by their
// first (latest-registered) parameter, which is the order they are reduced
// in. Every rank computes the same assignment from the same model.
//
//   assign_buckets({{40, 0}, {4, 0}, {80, 0}}, 64)   // {{2}, {1, 0}}
//
// bucket_cap_bytes: the cap for DDP's bucket_cap_mb option: the given MiB,
// or, unset, auto_bucket_cap_bytes(gradient_bytes) (an eighth of the
// gradients within [1, 25] MiB). Throws InvalidArgument for a cap <= 0.
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace cohort::parallel {

struct BucketParam {
  size_t bytes = 0;
  int dtype = 0;  // any key; parameters of different keys never share a bucket
};

// Indices into `params` (registration order), per bucket, in reduction order.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params,
                                                size_t cap_bytes);

size_t bucket_cap_bytes(std::optional<double> bucket_cap_mb, size_t gradient_bytes);

}  // namespace cohort::parallel
