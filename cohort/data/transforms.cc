#include "cohort/data/transforms.h"

namespace cohort::data::transforms {

Normalize::Normalize(double mean, double stddev)
    : Normalize(std::vector<double>{mean}, std::vector<double>{stddev}) {}

Normalize::Normalize(std::vector<double> mean, std::vector<double> stddev)
    : mean_(std::move(mean)), stddev_(std::move(stddev)) {
  COHORT_CHECK(!mean_.empty() && mean_.size() == stddev_.size(),
               "Normalize: needs as many means as stds (one, or one per channel), got {} and {}",
               mean_.size(), stddev_.size());
  for (double s : stddev_) COHORT_CHECK(s > 0, "Normalize: every std must be positive, got {}", s);
}

Tensor Normalize::apply(const Tensor& input, int64_t channel_dim) const {
  COHORT_CHECK(is_floating(input.dtype()),
               "Normalize: input must be floating (e.g. float32 pixels in [0, 1]), got {}",
               dtype_name(input.dtype()));
  // A copy: data sets may hand out views of what they keep.
  Tensor out = input.clone();
  if (mean_.size() == 1) {
    out.add_(-mean_[0]);
    out.div_(Tensor::scalar(stddev_[0], out.dtype()));
    return out;
  }
  const int64_t channels = static_cast<int64_t>(mean_.size());
  COHORT_CHECK(out.dim() > channel_dim && out.size(channel_dim) == channels,
               "Normalize: {} means and stds need {} channels in dim {}, the input is {}", channels,
               channels, channel_dim, shape_str(out.sizes()));
  for (int64_t c = 0; c < channels; ++c) {
    Tensor plane = out.select(channel_dim, c);
    plane.add_(-mean_[c]);
    plane.div_(Tensor::scalar(stddev_[c], out.dtype()));
  }
  return out;
}

Example Normalize::operator()(Example example) const {
  example.input = apply(example.input, 0);
  return example;
}

Batch Normalize::operator()(Batch batch) const {
  batch.input = apply(batch.input, 1);
  return batch;
}

}  // namespace cohort::data::transforms
