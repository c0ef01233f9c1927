#include "cohort/parallel/pipeline/partition.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"

namespace cohort::parallel::pipeline {

std::vector<double> measure_layer_costs(const nn::Sequential& model, const Tensor& sample,
                                        int repeats) {
  COHORT_CHECK(sample.defined(), "measure_layer_costs: the sample micro-batch is undefined");
  COHORT_CHECK(repeats >= 1, "measure_layer_costs: repeats must be >= 1, got {}", repeats);
  std::vector<Tensor> params = model.parameters();
  std::vector<Tensor> saved;  // the caller's gradients, put back at the end
  for (const Tensor& p : params) saved.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  EnableGradGuard grad_on;
  std::vector<double> costs(model.size(), std::numeric_limits<double>::infinity());
  for (int rep = 0; rep < repeats; ++rep) {
    Tensor x = sample;
    for (size_t i = 0; i < model.size(); ++i) {
      Tensor in = x.detach();
      const bool floating = is_floating(in.dtype());
      if (floating) in.set_requires_grad(true);
      auto t0 = std::chrono::steady_clock::now();
      Tensor y = model[i]->forward(in);
      if (y.requires_grad()) y.backward(ones_like(y));
      auto t1 = std::chrono::steady_clock::now();
      costs[i] = std::min(costs[i], std::chrono::duration<double>(t1 - t0).count());
      x = y.detach();
    }
  }
  for (size_t k = 0; k < params.size(); ++k) params[k].set_grad(saved[k]);
  return costs;
}

std::vector<int64_t> balanced_cuts(const std::vector<double>& costs, int stages) {
  const int64_t n = static_cast<int64_t>(costs.size());
  COHORT_CHECK(stages >= 1 && n >= stages,
               "pipeline partition: cannot cut {} layers into {} stages (each stage needs at "
               "least one layer)",
               n, stages);
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i + 1)] =
        prefix[static_cast<size_t>(i)] + costs[static_cast<size_t>(i)];
  auto sum = [&](int64_t a, int64_t b) {
    return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)];
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest max stage cost of the first i layers in k stages.
  std::vector<std::vector<double>> best(static_cast<size_t>(stages + 1),
                                        std::vector<double>(static_cast<size_t>(n + 1), inf));
  std::vector<std::vector<int64_t>> from(static_cast<size_t>(stages + 1),
                                         std::vector<int64_t>(static_cast<size_t>(n + 1), 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int64_t i = k; i <= n; ++i) {
      for (int64_t j = k - 1; j < i; ++j) {
        const double c =
            std::max(best[static_cast<size_t>(k - 1)][static_cast<size_t>(j)], sum(j, i));
        // Ties go to the later cut: earlier stages take fewer layers.
        if (c <= best[static_cast<size_t>(k)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(i)] = c;
          from[static_cast<size_t>(k)][static_cast<size_t>(i)] = j;
        }
      }
    }
  }
  std::vector<int64_t> starts(static_cast<size_t>(stages + 1));
  starts[static_cast<size_t>(stages)] = n;
  for (int k = stages; k >= 1; --k)
    starts[static_cast<size_t>(k - 1)] =
        from[static_cast<size_t>(k)][static_cast<size_t>(starts[static_cast<size_t>(k)])];
  return starts;
}

std::vector<int64_t> starts_from_cut_points(const std::vector<int64_t>& cut_points, int stages,
                                            int64_t children) {
  COHORT_CHECK(static_cast<int>(cut_points.size()) == stages - 1,
               "pipeline partition: {} stages need {} cut points, got {}", stages, stages - 1,
               cut_points.size());
  std::vector<int64_t> starts{0};
  for (int64_t c : cut_points) starts.push_back(c);
  starts.push_back(children);
  for (size_t s = 0; s + 1 < starts.size(); ++s)
    COHORT_CHECK(starts[s] < starts[s + 1],
                 "pipeline partition: cut points must rise strictly inside (0, {}) so that every "
                 "stage holds a layer; stage {} would be [{}, {})",
                 children, s, starts[s], starts[s + 1]);
  return starts;
}

double max_stage_cost(const std::vector<double>& costs, const std::vector<int64_t>& starts) {
  double worst = 0;
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    double c = 0;
    for (int64_t i = starts[s]; i < starts[s + 1]; ++i) c += costs[static_cast<size_t>(i)];
    worst = std::max(worst, c);
  }
  return worst;
}

std::shared_ptr<nn::Sequential> make_stage(const nn::Sequential& model,
                                           const std::vector<int64_t>& starts, int stage) {
  COHORT_CHECK(stage >= 0 && static_cast<size_t>(stage) + 1 < starts.size(),
               "pipeline partition: stage {} out of [0, {})", stage, starts.size() - 1);
  auto children = model.named_children();
  auto out = std::make_shared<nn::Sequential>();
  for (int64_t i = starts[static_cast<size_t>(stage)]; i < starts[static_cast<size_t>(stage) + 1];
       ++i)
    out->add(children[static_cast<size_t>(i)].first, children[static_cast<size_t>(i)].second);
  return out;
}

}  // namespace cohort::parallel::pipeline
