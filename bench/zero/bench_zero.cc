// One rank of a GPT training step under DDP or ZeRO (issue 23), started by
// `cohort run --nproc-per-node N bench_zero --mode ddp|zero1|zero2|zero3`:
// the GPT reference size (4 layers, 4 heads, width 256, block 128, byte
// vocabulary; docs/transformers.md), AdamW, --batch sequences of 128 random
// tokens per rank and step, --warmup steps then --steps timed one by one.
// Rank 0 prints one JSON line: ms/step median (min, max); the largest peak
// RSS over the ranks (getrusage ru_maxrss); this rank's model state measured
// from the buffers (parameters, gradients, optimizer state) against the
// ZeRO formula for fp32 AdamW; stage 3's gather-buffer peak; and the bytes
// this rank passed to the process group per step against 2 psi / 3 psi.
// Units: the GPT's Blocks (the embeddings, ln_f and lm_head form the root).
// The storage cache is emptied after construction, so that the peak RSS
// shows what training keeps rather than what setting up freed.
//
// --gather-buffers release: stage 3 without its resident gather buffers
// (ZeroOptions::resident_gather_buffers false), to measure what they save.
//
// Usage: bench_zero --mode ddp|zero1|zero2|zero3 [--batch B] [--steps N]
//                   [--warmup N] [--threads N] [--n-layer L] [--n-embd C]
//                   [--gather-buffers resident|release]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/kernels/interleaved_timing.h"
#include "cohort/base/parallel.h"
#include "cohort/core/storage.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/adam.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/zero/sharded_optimizer.h"

using namespace cohort;

int main(int argc, char** argv) {
  std::string mode, gather_buffers = "resident";
  bench::StepFlags timing{.batch = 8, .steps = 5, .warmup = 2, .threads = 1};
  int64_t n_layer = 4, n_embd = 256;
  bench::Args args(argc, argv,
                   "bench_zero --mode ddp|zero1|zero2|zero3 [--batch B] [--steps N] [--warmup N] "
                   "[--threads N] [--n-layer L] [--n-embd C] [--gather-buffers resident|release]");
  while (args.next()) {
    if (timing.read(args)) {
      continue;
    } else if (args.is("--mode")) {
      mode = args.value();
    } else if (args.is("--n-layer")) {
      n_layer = args.integer();
    } else if (args.is("--n-embd")) {
      n_embd = args.integer();
    } else if (args.is("--gather-buffers")) {
      gather_buffers = args.value();
    } else {
      args.unknown();
    }
  }
  const int64_t batch = timing.batch;
  const int steps = timing.steps, warmup = timing.warmup, threads = timing.threads;
  int stage = -1;
  if (mode == "ddp") stage = 0;
  if (mode.size() == 5 && mode.rfind("zero", 0) == 0 && mode[4] >= '1' && mode[4] <= '3')
    stage = mode[4] - '0';
  if (stage < 0) args.fail("--mode must be ddp, zero1, zero2 or zero3");
  if (gather_buffers != "resident" && gather_buffers != "release")
    args.fail("--gather-buffers must be resident or release");
  set_num_threads(threads);
  auto pg = distributed::init_process_group("native", "env://");
  const int rank = pg->rank(), world = pg->size();

  nn::GPTConfig config;  // the reference size
  config.n_layer = n_layer;
  config.n_embd = n_embd;
  Generator gen(1);
  auto model = std::make_shared<nn::GPT>(config, gen);
  const int64_t psi = model->num_parameters();
  optim::AdamWOptions o{.lr = 3e-4, .beta2 = 0.95, .weight_decay = 0.1};

  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  std::unique_ptr<optim::AdamW> ddp_opt;
  std::unique_ptr<parallel::ShardedDataParallel> zero;
  std::unique_ptr<parallel::ShardedOptimizer> zero_opt;
  if (stage == 0) {
    ddp = std::make_unique<parallel::DistributedDataParallel>(model, pg);
    ddp_opt = std::make_unique<optim::AdamW>(model->parameters(), o);
  } else {
    zero = std::make_unique<parallel::ShardedDataParallel>(
        model, pg,
        parallel::ZeroOptions{.stage = stage,
                              .unit_policy = parallel::module_type_policy({"Block"}),
                              .resident_gather_buffers = gather_buffers == "resident"});
    zero_opt = std::make_unique<parallel::ShardedOptimizer>(
        *zero, std::make_unique<optim::AdamW>(zero->shard_parameters(), o));
  }
  // What construction freed (the unsharded parameters under stage 3) would
  // otherwise stay resident in the storage cache (core/storage.h).
  Storage::release_cache();
  Generator data(100 + static_cast<uint64_t>(rank));
  std::vector<double> ms;
  uint64_t traffic_before = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    Tensor idx = randint(0, config.vocab_size, {batch, config.block_size}, data);
    Tensor tgt = randint(0, config.vocab_size, {batch, config.block_size}, data);
    pg->barrier();
    if (zero) traffic_before = zero->traffic().total();
    const auto t0 = std::chrono::steady_clock::now();
    auto loss_of = [&](nn::Module& m) { return static_cast<nn::GPT&>(m).forward(idx, tgt); };
    if (ddp) {
      ddp_opt->zero_grad();
      ddp->forward_with(loss_of).backward();
      ddp_opt->step();
    } else {
      zero_opt->zero_grad();
      zero->forward_with(loss_of).backward();
      zero_opt->step();
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (s >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  double state = 0, traffic = 0, gather = 0, gather_buffers_bytes = 0;
  if (ddp) {
    size_t buckets = 0;
    for (size_t b = 0; b < ddp->reducer().num_buckets(); ++b)
      buckets += ddp->reducer().bucket_buffer(b).nbytes();
    size_t params = 0;
    for (const Tensor& p : model->parameters()) params += p.nbytes();
    state = static_cast<double>(params + buckets + parallel::optimizer_state_bytes(*ddp_opt));
    traffic = 2.0 * static_cast<double>(buckets);
  } else {
    parallel::ZeroMemoryStats m = zero->memory_stats();
    state = static_cast<double>(m.parameter_bytes + m.gradient_bytes + zero_opt->state_bytes());
    traffic = static_cast<double>(zero->traffic().total() - traffic_before);
    gather = static_cast<double>(m.gather_bytes_peak);
    gather_buffers_bytes = static_cast<double>(m.gather_buffer_bytes);
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  Tensor rss = Tensor::from_vector<double>({static_cast<double>(ru.ru_maxrss) * 1024.0});
  pg->all_reduce(rss, {.op = distributed::ReduceOp::kMax});
  if (rank == 0) {
    std::printf(
        "{\"mode\": \"%s\", \"ranks\": %d, \"threads\": %d, \"batch\": %lld, \"params\": %lld, "
        "\"ms_per_step\": %.1f, \"ms_min\": %.1f, \"ms_max\": %.1f, \"peak_rss_mb\": %.1f, "
        "\"model_state_mb\": %.2f, \"model_state_formula_mb\": %.2f, \"gather_peak_mb\": %.2f, "
        "\"gather_buffers_mb\": %.2f, \"bytes_per_step_mb\": %.2f, \"bytes_formula_mb\": %.2f}\n",
        mode.c_str(), world, threads, static_cast<long long>(batch), static_cast<long long>(psi),
        bench::median(ms), *std::min_element(ms.begin(), ms.end()),
        *std::max_element(ms.begin(), ms.end()), rss.item<double>() / 1e6, state / 1e6,
        parallel::zero_model_state_bytes(stage, psi, world) / 1e6, gather / 1e6,
        gather_buffers_bytes / 1e6, traffic / 1e6, parallel::zero_traffic_bytes(stage, psi) / 1e6);
  }
  distributed::destroy_process_group(pg);
  return 0;
}
