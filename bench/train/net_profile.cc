// Where the time of one `cohort train` step of Net goes: times each piece of
// the training step the Trainer runs (cohort/train/trainer.cc) on real
// Fashion-MNIST batches through the DataLoader -- batch fetch, every forward
// op, every op's backward (each op's backward timed alone, on a detached
// input with the upstream gradient of the real step), the full backward,
// clip_grad_norm, the SGD step and zero_grad -- and prints ms per step and
// the share of each. Run with the thread count to profile.
// COHORT_KERNELS=baseline|avx2|avx512 forces the kernel path.
// Usage: bench_net_profile [threads] [steps] [prefetch] [data-dir]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/data/data_loader.h"
#include "cohort/data/mnist.h"
#include "cohort/nn/models/net.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

namespace {

struct Timers {
  std::vector<std::string> order;
  std::map<std::string, double> ms;
  template <typename F>
  auto time(const std::string& name, F&& f) {
    auto t0 = Clock::now();
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      add(name, t0);
    } else {
      auto r = f();
      add(name, t0);
      return r;
    }
  }
  void add(const std::string& name, Clock::time_point t0) {
    if (!ms.count(name)) order.push_back(name);
    ms[name] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
};

// Times the backward of `op` alone: op applied to a detached copy of its
// input, then backward with the upstream gradient `dy`.
template <typename Op>
void time_backward(Timers& t, const std::string& name, const Tensor& input, const Tensor& dy,
                   Op op) {
  Tensor x = input.detach();
  x.set_requires_grad(true);
  Tensor y = op(x);
  t.time(name, [&] { y.backward(dy); });
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  int steps = argc > 2 ? std::atoi(argv[2]) : 100;
  int prefetch = argc > 3 ? std::atoi(argv[3]) : 2;
  std::string dir = argc > 4 ? argv[4] : data::FashionMnist::kDefaultRoot;
  set_default_num_threads(threads);
  set_num_threads(threads);
  if (const char* kernels = std::getenv("COHORT_KERNELS"))
    apply_kernel_path_setting(kernels, "COHORT_KERNELS");
  Generator gen(0);
  auto model = std::make_shared<nn::Net>(gen);
  auto params = model->parameters();
  optim::SGD opt(params, {.lr = 0.01, .momentum = 0.9});
  auto train = std::make_shared<data::FashionMnist>(dir, data::Split::kTrain);
  data::DataLoader loader(train,
                          {.batch_size = 64, .shuffle = true, .seed = 0, .prefetch = prefetch});
  auto& c1 = model->conv1();
  auto& c2 = model->conv2();
  auto& f1 = model->fc1();
  auto& f2 = model->fc2();

  Timers t, ops;  // t: the real step; ops: each op's backward alone
  int done = 0;
  const int warmup = 10;
  auto it = loader.begin();
  auto start = Clock::now();
  while (done < steps + warmup && it != loader.end()) {
    if (done == warmup) {
      t = Timers{};
      ops = Timers{};
      start = Clock::now();
    }
    data::Batch& b = *it;
    t.time("zero_grad", [&] { opt.zero_grad(); });
    Tensor h1 = t.time("fwd conv1+relu", [&] { return c1.forward_relu(b.input); });
    Tensor h2 = t.time("fwd conv2+relu", [&] { return c2.forward_relu(h1); });
    Tensor h3 = t.time("fwd max_pool2d", [&] { return max_pool2d(h2, {2, 2}); });
    Tensor h4 = t.time("fwd flatten", [&] { return flatten(h3, 1); });
    Tensor h5 = t.time("fwd fc1+relu", [&] { return relu(linear(h4, f1.weight(), f1.bias())); });
    Tensor h6 = t.time("fwd fc2", [&] { return linear(h5, f2.weight(), f2.bias()); });
    Tensor h7 = t.time("fwd log_softmax", [&] { return log_softmax(h6, 1); });
    Tensor loss = t.time("fwd nll_loss", [&] { return nll_loss(h7, b.target); });
    double l = t.time("loss.item", [&] { return loss.item<double>(); });
    (void)l;
    t.time("backward (whole)", [&] { loss.backward(); });
    t.time("clip_grad_norm", [&] { optim::clip_grad_norm(params, 10.0); });
    t.time("sgd step", [&] { opt.step(); });
    t.time("next batch", [&] { ++it; });

    // Each op's backward alone (not part of the step's time above).
    if (done >= warmup) {
      Tensor g7 = Tensor::full(h7.sizes(), -1.0f / 64);
      Tensor g6 = Tensor::full(h6.sizes(), 0.01f);
      Tensor g5 = Tensor::full(h5.sizes(), 0.01f);
      Tensor g3 = Tensor::full(h3.sizes(), 0.01f);
      Tensor g2 = Tensor::full(h2.sizes(), 0.01f);
      Tensor g1 = Tensor::full(h1.sizes(), 0.01f);
      time_backward(ops, "bwd log_softmax", h6, g7,
                    [](const Tensor& x) { return log_softmax(x, 1); });
      time_backward(ops, "bwd fc2", h5, g6,
                    [&](const Tensor& x) { return linear(x, f2.weight(), f2.bias()); });
      time_backward(ops, "bwd fc1+relu", h4, g5,
                    [&](const Tensor& x) { return relu(linear(x, f1.weight(), f1.bias())); });
      time_backward(ops, "bwd max_pool2d", h2, g3, [](const Tensor& x) {
        return max_pool2d(x, {2, 2});
      });
      time_backward(ops, "bwd conv2+relu", h1, g2,
                    [&](const Tensor& x) { return c2.forward_relu(x); });
      time_backward(ops, "bwd conv1+relu (weight only)", b.input, g1,
                    [&](const Tensor& x) { return c1.forward_relu(x.detach()); });
      opt.zero_grad();
    }
    ++done;
  }
  int measured = done - warmup;
  double wall = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  double total = 0;
  for (auto& n : t.order) total += t.ms[n];
  std::printf("Net training step, batch 64, %d threads, %d steps, DataLoader prefetch %d\n",
              threads, measured, prefetch);
  std::printf("%-30s %9s %7s\n", "piece of the step", "ms/step", "share");
  for (auto& n : t.order) {
    std::printf("%-30s %9.3f %6.1f%%\n", n.c_str(), t.ms[n] / measured, 100 * t.ms[n] / total);
  }
  std::printf("%-30s %9.3f  -> %.1f s per 938-step epoch\n", "step total", total / measured,
              total / measured * 938 / 1000);
  std::printf("\neach op's backward timed alone (sums to about 'backward (whole)'):\n");
  for (auto& n : ops.order) {
    std::printf("%-30s %9.3f\n", n.c_str(), ops.ms[n] / measured);
  }
  (void)wall;
  return 0;
}
