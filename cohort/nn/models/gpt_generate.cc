#include "cohort/nn/models/gpt_generate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/ops.h"

namespace cohort::nn {

namespace {

// One token per row of logits [B, V] (float32), as generate() documents.
std::vector<int64_t> sample_rows(const Tensor& logits, const GenerateOptions& o, Generator& gen) {
  const int64_t b = logits.size(0), v = logits.size(1);
  std::vector<double> l = logits.to_vector<double>();
  std::vector<int64_t> out(static_cast<size_t>(b));
  std::vector<double> u;
  if (o.temperature > 0) u = rand({b}, gen, kFloat64).to_vector<double>();
  std::vector<double> row(static_cast<size_t>(v)), sorted;
  for (int64_t r = 0; r < b; ++r) {
    const double* lr = l.data() + r * v;
    if (o.temperature == 0) {
      out[r] = std::max_element(lr, lr + v) - lr;
      continue;
    }
    for (int64_t j = 0; j < v; ++j) row[j] = lr[j] / o.temperature;
    double threshold = -std::numeric_limits<double>::infinity();
    if (o.top_k > 0 && o.top_k < v) {
      sorted = row;
      std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                       std::greater<double>());
      threshold = sorted[o.top_k - 1];
    }
    const double m = *std::max_element(row.begin(), row.end());
    double total = 0;
    for (int64_t j = 0; j < v; ++j) {
      row[j] = row[j] < threshold ? 0.0 : std::exp(row[j] - m);
      total += row[j];
    }
    const double target = u[r] * total;
    double acc = 0;
    int64_t pick = -1;
    for (int64_t j = 0; j < v; ++j) {
      if (row[j] == 0) continue;
      pick = j;  // the last token with mass, should rounding leave target unreached
      acc += row[j];
      if (acc > target) break;
    }
    out[r] = pick;
  }
  return out;
}

}  // namespace

Tensor generate(GPT& model, const Tensor& prompt, int64_t max_new_tokens,
                const GenerateOptions& options, Generator& gen) {
  const GPTConfig& cfg = model.config();
  COHORT_CHECK(prompt.defined() && prompt.dtype() == kInt64 && prompt.dim() == 2 &&
                   prompt.size(0) > 0 && prompt.size(1) > 0,
               "generate: prompt must be int64 [B, T] with B, T >= 1, got {}",
               prompt.defined()
                   ? fmt::format("{} {}", dtype_name(prompt.dtype()), shape_str(prompt.sizes()))
                   : std::string("undefined"));
  COHORT_CHECK(max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got {}",
               max_new_tokens);
  COHORT_CHECK(options.temperature >= 0 && std::isfinite(options.temperature),
               "generate: temperature must be finite and >= 0 (0: greedy), got {}",
               options.temperature);
  COHORT_CHECK(options.top_k >= 0, "generate: top_k must be >= 0 (0: all tokens), got {}",
               options.top_k);
  NoGradGuard no_grad;
  const int64_t b = prompt.size(0), t0 = prompt.size(1);
  const std::vector<int64_t> seq = prompt.contiguous().to_vector<int64_t>();  // [B, T0]
  int64_t t = t0;
  std::vector<int64_t> all(static_cast<size_t>(b * (t0 + max_new_tokens)));
  for (int64_t r = 0; r < b; ++r)
    std::copy(seq.begin() + r * t0, seq.begin() + (r + 1) * t0,
              all.begin() + r * (t0 + max_new_tokens));
  const int64_t stride = t0 + max_new_tokens;
  // The last min(t, block_size) tokens of every row, [B, n].
  auto window = [&] {
    const int64_t n = std::min(t, cfg.block_size);
    Tensor w = Tensor::empty({b, n}, kInt64);
    int64_t* p = w.data_ptr<int64_t>();
    for (int64_t r = 0; r < b; ++r)
      std::copy(all.begin() + r * stride + (t - n), all.begin() + r * stride + t, p + r * n);
    return w;
  };
  // The model's device: token ids go there, the last logits come back to be
  // sampled on the host.
  const Device device = model.device();
  KVCache cache = model.make_cache(b);
  Tensor logits;
  if (max_new_tokens > 0) logits = model.forward(window().to(device), cache);
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    Tensor last = select(logits, 1, logits.size(1) - 1).cpu();  // [B, V]
    std::vector<int64_t> next = sample_rows(last, options, gen);
    for (int64_t r = 0; r < b; ++r) all[r * stride + t] = next[r];
    ++t;
    Tensor next_t = Tensor::from_vector<int64_t>(next, {b, 1});
    if (options.on_token) options.on_token(next_t.view({b}));
    if (step + 1 == max_new_tokens) break;
    if (cache.length < cfg.block_size) {
      logits = model.forward(next_t.to(device), cache);
    } else {  // positions would pass block_size: restart from the cropped context
      cache.reset();
      logits = model.forward(window().to(device), cache);
    }
  }
  return Tensor::from_vector<int64_t>(all, {b, stride});
}

}  // namespace cohort::nn
