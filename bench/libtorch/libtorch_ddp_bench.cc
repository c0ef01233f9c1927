// Step time of dist-mnist's model (pytorch/examples cpp/distributed) trained
// with LibTorch, batch 32 per rank, one thread per rank, synchronised three
// ways: cohort's DDP for LibTorch (--mode cohort), per-parameter all_reduce
// through c10d's ProcessGroupGloo after backward as dist-mnist does (--mode
// gloo), or not at all: one process alone (--mode single, the scaling
// baseline) or, under `cohort run`, every rank training on its own without
// any communication (--mode independent: what the host allows W processes
// sharing its cores, memory bandwidth and caches; the scaling baseline that
// leaves out only the communication). --mode cohort-copy: cohort's DDP with
// copied gradients instead of .grad over the buckets; --bucket-mb sets DDP's
// bucket_cap_mb (default: DDP's own choice).
// Run by bench/libtorch/run.sh under `cohort run`; prints rank 0's mean step
// and where it went: zero_grad, forward, backward (for DDP split at the
// hooks: compute up to the first gradient, first to last gradient, time in
// the hooks, the wait for the reductions after the last gradient, the copy
// back), the averaging after backward (gloo) and the optimizer step.
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cohort/libtorch/distributed_data_parallel.h"

namespace {

struct Model : torch::nn::Module {
  Model()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 10, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(10, 20, 5)))),
        conv2_drop(register_module("conv2_drop", torch::nn::Dropout2d())),
        fc1(register_module("fc1", torch::nn::Linear(320, 50))),
        fc2(register_module("fc2", torch::nn::Linear(50, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = torch::relu(fc1->forward(x.view({-1, 320})));
    x = torch::dropout(x, 0.5, is_training());
    return torch::log_softmax(fc2->forward(x), 1);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1, fc2;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "cohort", store_path = "/tmp/cohort-libtorch-bench-store";
  int steps = 300, warmup = 30;
  double bucket_mb = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mode"))
      mode = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--store"))
      store_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--bucket-mb"))
      bucket_mb = std::atof(argv[i + 1]);
  }
  torch::set_num_threads(1);
  const int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
  torch::manual_seed(0);
  auto model = std::make_shared<Model>();
  torch::optim::SGD opt(model->parameters(), 0.01);
  cohort::libtorch::ProcessGroup pg;
  std::unique_ptr<cohort::libtorch::DistributedDataParallel> ddp;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
  if (mode == "cohort" || mode == "cohort-copy") {
    pg = cohort::libtorch::init_process_group("native", "env://");
    cohort::libtorch::DistributedDataParallelOptions o;
    o.gradient_as_bucket_view = mode == "cohort";
    if (bucket_mb > 0) o.bucket_cap_mb = bucket_mb;
    ddp = std::make_unique<cohort::libtorch::DistributedDataParallel>(model, pg, o);
  } else if (mode == "gloo") {
    auto store = c10::make_intrusive<c10d::FileStore>(store_path, world);
    auto o = c10d::ProcessGroupGloo::Options::create();
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, o);
  } else if (mode != "single" && mode != "independent") {
    std::fprintf(stderr,
                 "libtorch_ddp_bench: --mode cohort|cohort-copy|gloo|single|independent, got %s\n",
                 mode.c_str());
    return 2;
  }
  auto x = torch::rand({32, 1, 28, 28});
  auto y = torch::randint(0, 10, {32});
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  // Phase sums over the timed steps, in ms.
  enum Phase {
    kZero,
    kForward,
    kBackward,
    kToFirstGrad,
    kFirstToLast,
    kHooks,
    kWait,
    kCopyBack,
    kAfterReduced,
    kAverage,
    kStep,
    kPhases
  };
  double sum[kPhases] = {};
  Clock::time_point t0;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == warmup) t0 = Clock::now();
    const bool timed = s >= warmup;
    const auto a = Clock::now();
    model->zero_grad();
    const auto b = Clock::now();
    auto out = ddp ? ddp->forward(x) : model->forward(x);
    auto loss = torch::nll_loss(out, y);
    const auto c = Clock::now();
    loss.backward();
    const auto d = Clock::now();
    if (gloo) {  // dist-mnist's averaging
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (auto& p : model->named_parameters()) {
        std::vector<torch::Tensor> tmp = {p.value().grad()};
        works.push_back(gloo->allreduce(tmp));
      }
      for (auto& w : works) w->wait();
      for (auto& p : model->named_parameters())
        p.value().grad().data() = p.value().grad().data() / world;
    }
    const auto e = Clock::now();
    opt.step();
    const auto f = Clock::now();
    if (!timed) continue;
    sum[kZero] += ms(b - a);
    sum[kForward] += ms(c - b);
    sum[kBackward] += ms(d - c);
    sum[kAverage] += ms(e - d);
    sum[kStep] += ms(f - e);
    if (ddp) {
      const auto tr = ddp->last_trace();
      sum[kToFirstGrad] += ms(tr.first_gradient - c);
      sum[kFirstToLast] += ms(tr.last_gradient - tr.first_gradient);
      sum[kHooks] += ms(tr.in_hooks);
      sum[kWait] += ms(tr.waiting);
      sum[kCopyBack] += ms(tr.reduced - tr.all_done);
      sum[kAfterReduced] += ms(d - tr.reduced);
    }
  }
  const double step_ms = ms(Clock::now() - t0) / steps;
  for (double& v : sum) v /= steps;
  if (rank != 0) return 0;
  std::printf("mode %s ranks %d: %.3f ms/step\n", mode.c_str(), world, step_ms);
  std::printf("  phases (ms/step): zero_grad %.3f forward %.3f backward %.3f", sum[kZero],
              sum[kForward], sum[kBackward]);
  if (ddp) {
    std::printf(
        " [to first gradient %.3f, first to last gradient %.3f, in hooks %.3f, waiting for the "
        "reductions %.3f, copy back %.3f, hook return to backward's end %.3f; %zu bucket(s)]",
        sum[kToFirstGrad], sum[kFirstToLast], sum[kHooks], sum[kWait], sum[kCopyBack],
        sum[kAfterReduced], ddp->num_buckets());
  }
  if (gloo) std::printf(" averaging %.3f", sum[kAverage]);
  std::printf(" step %.3f\n", sum[kStep]);
  return 0;
}
