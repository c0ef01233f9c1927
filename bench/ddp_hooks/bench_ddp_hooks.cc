// One rank of a GPT trained by DistributedDataParallel with a communication
// hook (cohort/parallel/comm_hooks/), started by `cohort run` on each of two
// hosts (run.sh: network namespaces joined by a 1 Gbit/s link). Per rank:
// --warmup untimed steps (PowerSGD's plain all_reduce steps:
// start_powerSGD_iter = --warmup), then --steps timed steps; rank 0 prints
// one JSON line: the median step time, the bytes this rank sent on the wire
// per timed step (the tx counter of --iface, read before and after them:
// what really crossed the link, headers included), the bytes the hook handed
// to the collectives per step (Reducer::reduced_bytes), and the loss over the
// last 5 steps (averaged over the ranks).
// The data teach something in a few steps: token t+1 = (5 t + 3) mod V from
// a random start, each rank its own sequences.
// Usage: bench_ddp_hooks --comm-hook allreduce|fp16|bf16|powersgd[:R] [--iface NAME]
//          [--n-layer L] [--n-head H] [--n-embd C] [--block-size T] [--vocab V]
//          [--batch B] [--steps N] [--warmup N] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/gpt/gpt_flags.h"
#include "bench/kernels/interleaved_timing.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/optim.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/train/comm_hook_choice.h"

using namespace cohort;

namespace {

// Bytes sent so far by `iface` in this network namespace (0 without one).
double tx_bytes(const std::string& iface) {
  if (iface.empty()) return 0;
  std::ifstream in("/sys/class/net/" + iface + "/statistics/tx_bytes");
  double v = 0;
  if (!(in >> v)) throw Error("bench_ddp_hooks: cannot read the tx counter of " + iface);
  return v;
}

int run(int argc, char** argv) {
  nn::GPTConfig config = nn::GPTConfig::reference();
  bench::StepFlags timing{.batch = 1, .steps = 10, .warmup = 5, .threads = 1};
  std::string hook_name = "allreduce", iface;
  bench::Args args(argc, argv,
                   "bench_ddp_hooks --comm-hook NAME [--iface NAME] [--preset ref|gpt2] [--n-layer "
                   "L] [--n-head H] "
                   "[--n-embd C] [--block-size T] [--vocab V] [--batch B] [--steps N] "
                   "[--warmup N] [--threads N]");
  while (args.next()) {
    if (timing.read(args) || bench::read_gpt_shape(args, config)) continue;
    if (args.is("--comm-hook")) {
      hook_name = args.value();
    } else if (args.is("--iface")) {
      iface = args.value();
    } else {
      args.unknown();
    }
  }
  config.validate();
  if (timing.steps < 1 || timing.warmup < 2) args.fail("--steps >= 1 and --warmup >= 2");
  set_num_threads(timing.threads);
  train::CommHookChoice choice = train::parse_comm_hook(hook_name);
  choice.start_iter = timing.warmup;

  auto pg = distributed::init_process_group("native", "env://");
  const int rank = pg->rank(), world = pg->size();
  Generator gen(1337);
  auto model = std::make_shared<nn::GPT>(config, gen);
  parallel::DistributedDataParallel ddp(model, pg, {.comm_hook = train::make_comm_hook(choice)});
  optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.0});

  Generator data(7 + static_cast<uint64_t>(rank));
  const int64_t T = config.block_size, V = config.vocab_size;
  auto step = [&] {
    Tensor start = randint(0, V, {timing.batch}, data);
    std::vector<int64_t> tokens(static_cast<size_t>(timing.batch * (T + 1)));
    const std::vector<int64_t> s = start.to_vector<int64_t>();
    for (int64_t b = 0; b < timing.batch; ++b) {
      int64_t t = s[static_cast<size_t>(b)];
      for (int64_t i = 0; i <= T; ++i) {
        tokens[static_cast<size_t>(b * (T + 1) + i)] = t;
        t = (5 * t + 3) % V;
      }
    }
    Tensor all = Tensor::from_vector(tokens, {timing.batch, T + 1});
    Tensor idx = all.narrow(1, 0, T).contiguous(), tgt = all.narrow(1, 1, T).contiguous();
    Tensor loss = cross_entropy(ddp.forward(idx).reshape({-1, V}), tgt.reshape({-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.item<double>();
  };
  for (int s = 0; s < timing.warmup; ++s) step();
  pg->barrier();
  const double tx0 = tx_bytes(iface);
  const size_t hook0 = ddp.reducer().reduced_bytes();
  std::vector<double> ms, losses;
  for (int s = 0; s < timing.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    losses.push_back(step());
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double tx1 = tx_bytes(iface);
  const size_t hook1 = ddp.reducer().reduced_bytes();
  const size_t last = std::min<size_t>(5, losses.size());
  double loss_sum = 0;
  for (size_t i = losses.size() - last; i < losses.size(); ++i) loss_sum += losses[i];
  Tensor loss_avg = Tensor::from_vector(std::vector<double>{loss_sum / last}, {1});
  pg->all_reduce(loss_avg, {.op = distributed::ReduceOp::kAvg});
  pg->barrier();
  distributed::destroy_process_group(pg);
  if (rank != 0) return 0;
  std::printf(
      "{\"hook\": \"%s\", \"ranks\": %d, \"params\": %lld, \"grad_bytes\": %lld, \"steps\": %d, "
      "\"warmup\": %d, \"ms_step\": %.2f, \"ms_min\": %.2f, \"wire_bytes_step\": %.0f, "
      "\"hook_bytes_step\": %.0f, \"loss\": %.4f, \"config\": \"%s\", \"batch\": %lld, "
      "\"cpu\": \"%s\"}\n",
      choice.kind == train::CommHookKind::kPowerSGD ? train::comm_hook_name(choice).c_str()
                                                    : hook_name.c_str(),
      world, static_cast<long long>(model->num_parameters()),
      static_cast<long long>(model->num_parameters() * 4), timing.steps, timing.warmup,
      bench::median(ms), *std::min_element(ms.begin(), ms.end()), (tx1 - tx0) / timing.steps,
      static_cast<double>(hook1 - hook0) / timing.steps, loss_avg.item<double>(),
      config.str().c_str(), static_cast<long long>(timing.batch), cpu_features().model.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp_hooks: %s\n", e.what());
    return 1;
  }
}
