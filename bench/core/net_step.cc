// One training step of docs/reference.md's Net (conv 1->20 5x5, relu, conv 20->20
// 5x5, relu, maxpool 2, linear 2000->50, relu, linear 50->10, log_softmax,
// nll) written directly against cohort's ops, with SGD momentum and grad-norm
// clipping done in place: measures the core+autograd cost of a step without
// nn/optim/data. Prints ms per step for forward, backward and update.
// Usage: bench_net_step [threads] [steps] [--unfused]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "cohort/base/parallel.h"
#include "cohort/cohort.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

Tensor param(const Shape& s, int64_t fan_in, Generator& g) {
  Tensor t = Tensor::empty(s);
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  uniform_(t, -bound, bound, g);
  return t.set_requires_grad(true);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  int steps = argc > 2 ? std::atoi(argv[2]) : 100;
  bool fused = !(argc > 3 && std::strcmp(argv[3], "--unfused") == 0);
  set_num_threads(threads);
  Generator gen(0);
  Tensor c1w = param({20, 1, 5, 5}, 25, gen), c1b = param({20}, 25, gen);
  Tensor c2w = param({20, 20, 5, 5}, 500, gen), c2b = param({20}, 500, gen);
  Tensor f1w = param({50, 2000}, 2000, gen), f1b = param({50}, 2000, gen);
  Tensor f2w = param({10, 50}, 50, gen), f2b = param({10}, 50, gen);
  std::vector<Tensor> params{c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b};
  std::vector<Tensor> bufs;
  for (auto& p : params) bufs.push_back(Tensor::zeros(p.sizes()));
  Tensor x = randn({64, 1, 28, 28}, gen);
  Tensor y = randint(0, 10, {64}, gen);
  double t_fwd = 0, t_bwd = 0, t_upd = 0;
  double last_loss = 0;
  std::clock_t cpu0 = std::clock();
  for (int s = 0; s < steps + 10; ++s) {
    if (s == 10) {
      t_fwd = t_bwd = t_upd = 0;
      cpu0 = std::clock();
    }
    auto t0 = Clock::now();
    for (auto& p : params) p.mutable_grad() = Tensor();
    Tensor h = fused ? conv2d_relu(x, c1w, c1b) : relu(conv2d(x, c1w, c1b));
    h = fused ? conv2d_relu(h, c2w, c2b) : relu(conv2d(h, c2w, c2b));
    h = max_pool2d(h, {2, 2});
    h = flatten(h, 1);
    h = relu(linear(h, f1w, f1b));
    h = log_softmax(linear(h, f2w, f2b), 1);
    Tensor loss = nll_loss(h, y);
    t_fwd += ms_since(t0);
    auto t1 = Clock::now();
    loss.backward();
    t_bwd += ms_since(t1);
    auto t2 = Clock::now();
    {
      NoGradGuard ng;
      double total = 0;
      for (auto& p : params) {
        Tensor g = p.grad();
        total += sum(mul(g, g)).item<double>();
      }
      double norm = std::sqrt(total);
      double coef = 10.0 / (norm + 1e-6);
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor g = params[i].grad();
        if (coef < 1) g.mul_(coef);
        bufs[i].mul_(0.9).add_(g);
        params[i].add_(bufs[i], -0.01);
      }
    }
    t_upd += ms_since(t2);
    last_loss = loss.item<double>();
  }
  double tot = (t_fwd + t_bwd + t_upd) / steps;
  double cpu_ms = 1000.0 * static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC / steps;
  std::printf(
      "cohort threads=%d fused=%d step_ms=%.2f cpu_ms=%.2f (fwd %.2f bwd %.2f upd %.2f) "
      "epoch_s=%.1f "
      "loss=%.4f\n",
      threads, fused ? 1 : 0, tot, cpu_ms, t_fwd / steps, t_bwd / steps, t_upd / steps,
      tot * 938 / 1000, last_loss);
  return 0;
}
