// Times the phases of one training step of Net (docs/reference.md's recipe: batch
// 64, NLL loss, clip_grad_norm 10, SGD lr 0.01 momentum 0.9) on random data,
// to show where a step's time goes and that the nn/optim layers add little
// on top of the kernels.
// Usage: bench_nn_step [--threads N] [--steps N] [--batch N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cohort/base/parallel.h"
#include "cohort/nn/models/net.h"
#include "cohort/optim/optim.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int threads = 1, steps = 50, batch = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (a == "--threads")
      threads = v;
    else if (a == "--steps")
      steps = v;
    else if (a == "--batch")
      batch = v;
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--steps N] [--batch N]\n", argv[0]);
      return 2;
    }
  }
  set_num_threads(threads);
  Generator gen(1);
  nn::Net net(gen);
  optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = rand({batch, 1, 28, 28}, gen);
  Tensor y = randint(0, 10, {batch}, gen);
  double t_zero = 0, t_fwd = 0, t_bwd = 0, t_clip = 0, t_step = 0;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  for (int s = -5; s < steps; ++s) {  // 5 warm-up steps
    auto t0 = Clock::now();
    opt.zero_grad();
    auto t1 = Clock::now();
    Tensor loss = nll_loss(net(x), y);
    auto t2 = Clock::now();
    loss.backward();
    auto t3 = Clock::now();
    optim::clip_grad_norm(net.parameters(), 10.0);
    auto t4 = Clock::now();
    opt.step();
    auto t5 = Clock::now();
    if (s < 0) continue;
    t_zero += ms(t0, t1);
    t_fwd += ms(t1, t2);
    t_bwd += ms(t2, t3);
    t_clip += ms(t3, t4);
    t_step += ms(t4, t5);
  }
  double total = t_zero + t_fwd + t_bwd + t_clip + t_step;
  std::printf(
      "nn_step threads=%d batch=%d steps=%d  per step: total %.3f ms  forward %.3f  backward "
      "%.3f  zero_grad %.4f  clip %.4f  sgd %.4f  (%.0f samples/s)\n",
      threads, batch, steps, total / steps, t_fwd / steps, t_bwd / steps, t_zero / steps,
      t_clip / steps, t_step / steps, 1000.0 * batch * steps / total);
  return 0;
}
