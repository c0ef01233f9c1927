#include "cohort/data/window_sampler.h"

#include <algorithm>
#include <random>

#include "cohort/base/error.h"

namespace cohort::data {

Batch window_batch(const TokenStream& stream, std::span<const int64_t> offsets,
                   int64_t block_size) {
  COHORT_CHECK(block_size >= 1, "window_batch: block_size must be >= 1, got {}", block_size);
  const auto b = static_cast<int64_t>(offsets.size());
  const int64_t last = stream.size() - block_size - 1;  // the largest valid offset
  Tensor input = Tensor::empty({b, block_size}, DType::kInt64);
  Tensor target = Tensor::empty({b, block_size}, DType::kInt64);
  int64_t* x = input.data_ptr<int64_t>();
  int64_t* y = target.data_ptr<int64_t>();
  const uint16_t* tokens = stream.tokens().data();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t o = offsets[static_cast<size_t>(i)];
    COHORT_CHECK(o >= 0 && o <= last,
                 "window_batch: offset {} of {}: a window of block_size + 1 = {} tokens must start "
                 "in [0, {}]",
                 o, stream.source(), block_size + 1, last);
    const uint16_t* w = tokens + o;
    int64_t* xi = x + i * block_size;
    int64_t* yi = y + i * block_size;
    for (int64_t t = 0; t < block_size; ++t) {
      xi[t] = w[t];
      yi[t] = w[t + 1];
    }
  }
  return Batch{std::move(input), std::move(target)};
}

std::vector<int64_t> torch_cpu_randint(int64_t high, int64_t n, uint64_t seed) {
  COHORT_CHECK(high >= 1 && n >= 0, "torch_cpu_randint: need high >= 1 and n >= 0, got {} and {}",
               high, n);
  std::mt19937 mt(static_cast<uint32_t>(seed));
  const auto range = static_cast<uint64_t>(high);
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (range >= (uint64_t{1} << 32)) {
    for (int64_t& v : out) {
      const uint64_t hi = mt(), lo = mt();
      v = static_cast<int64_t>(((hi << 32) | lo) % range);
    }
  } else {
    for (int64_t& v : out) v = static_cast<int64_t>(static_cast<uint64_t>(mt()) % range);
  }
  return out;
}

namespace {

void check_common(const TokenStream& s, int64_t b, int64_t t, int64_t r, int64_t rank,
                  const char* op) {
  COHORT_CHECK(b >= 1, "{}: batch_size must be >= 1, got {}", op, b);
  COHORT_CHECK(t >= 1, "{}: block_size must be >= 1, got {}", op, t);
  COHORT_CHECK(r >= 1, "{}: num_replicas must be >= 1, got {}", op, r);
  COHORT_CHECK(rank >= 0 && rank < r, "{}: rank {} is not in [0, {}]", op, rank, r - 1);
  COHORT_CHECK(s.size() >= t + 1,
               "{}: {} holds {} tokens, fewer than block_size + 1 = {} (one window of block_size "
               "inputs and the next-token target): use more data or a smaller block_size",
               op, s.source().empty() ? "the stream" : s.source(), s.size(), t + 1);
}

}  // namespace

WindowSampler::WindowSampler(TokenStream stream, const Options& options)
    : stream_(std::move(stream)), options_(options) {
  check_common(stream_, options.batch_size, options.block_size, options.num_replicas, options.rank,
               "WindowSampler");
}

std::vector<int64_t> WindowSampler::offsets(int64_t step) const {
  COHORT_CHECK(step >= 0, "WindowSampler::offsets: step must be >= 0, got {}", step);
  const int64_t b = options_.batch_size;
  std::vector<int64_t> all = torch_cpu_randint(num_offsets(), options_.num_replicas * b,
                                               options_.seed + static_cast<uint64_t>(step));
  const auto first = all.begin() + options_.rank * b;
  return std::vector<int64_t>(first, first + b);
}

Batch WindowSampler::batch(int64_t step) const {
  return window_batch(stream_, offsets(step), options_.block_size);
}

Batch WindowSampler::next() {
  Batch b = batch(step_);
  ++step_;
  return b;
}

void WindowSampler::set_step(int64_t step) {
  COHORT_CHECK(step >= 0, "WindowSampler::set_step: step must be >= 0, got {}", step);
  step_ = step;
}

EvalWindows::EvalWindows(TokenStream stream, const Options& options)
    : stream_(std::move(stream)), options_(options) {
  check_common(stream_, options.batch_size, options.block_size, options.num_replicas, options.rank,
               "EvalWindows");
  COHORT_CHECK(options.max_batches >= 0, "EvalWindows: max_batches must be >= 0 (0: all), got {}",
               options.max_batches);
  const int64_t global = options.num_replicas * options.batch_size;
  num_windows_ = (stream_.size() - 1) / options.block_size;
  if (options.max_batches > 0) num_windows_ = std::min(num_windows_, options.max_batches * global);
  num_batches_ = (num_windows_ + global - 1) / global;
}

std::vector<int64_t> EvalWindows::offsets(int64_t index) const {
  COHORT_CHECK(index >= 0 && index < num_batches_,
               "EvalWindows::offsets: batch {} is not in [0, {})", index, num_batches_);
  const int64_t b = options_.batch_size;
  const int64_t first = index * options_.num_replicas * b + options_.rank * b;
  const int64_t end = std::min(first + b, num_windows_);
  std::vector<int64_t> out;
  for (int64_t w = first; w < end; ++w) out.push_back(w * options_.block_size);
  return out;
}

Batch EvalWindows::batch(int64_t index) const {
  return window_batch(stream_, offsets(index), options_.block_size);
}

}  // namespace cohort::data
