#include "cohort/parallel/buckets.h"

#include <algorithm>
#include <map>

#include "cohort/base/error.h"
#include "cohort/parallel/distributed_data_parallel.h"

namespace cohort::parallel {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params,
                                                size_t cap_bytes) {
  struct Open {
    std::vector<size_t> params;
    size_t bytes = 0;
  };
  std::map<int, Open> open;
  std::vector<std::vector<size_t>> closed;
  for (size_t k = params.size(); k-- > 0;) {
    Open& o = open[params[k].dtype];
    const size_t bytes = params[k].bytes;
    if (!o.params.empty() && o.bytes + bytes > cap_bytes) {
      closed.push_back(std::move(o.params));
      o = Open{};
    }
    o.params.push_back(k);
    o.bytes += bytes;
  }
  for (auto& [dtype, o] : open)
    if (!o.params.empty()) closed.push_back(std::move(o.params));
  // Reduction order: by the first (latest-registered) parameter of each bucket.
  std::sort(closed.begin(), closed.end(),
            [](const auto& a, const auto& b) { return a.front() > b.front(); });
  return closed;
}

size_t bucket_cap_bytes(std::optional<double> bucket_cap_mb, size_t gradient_bytes) {
  if (!bucket_cap_mb) return auto_bucket_cap_bytes(gradient_bytes);
  COHORT_CHECK(*bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be > 0, got {}",
               *bucket_cap_mb);
  return std::max<size_t>(1, static_cast<size_t>(*bucket_cap_mb * 1024.0 * 1024.0));
}

}  // namespace cohort::parallel
