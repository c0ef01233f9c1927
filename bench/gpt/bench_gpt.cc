// cohort's GPT training step, the peer of torch_gpt.py (issue 21): the same
// model (cohort::nn::GPT), AdamW (betas 0.9/0.95, weight decay 0.1 on 2-D
// weights only, lr 3e-4), random token batches from a seeded generator;
// --warmup steps, then --steps steps timed one by one. Prints one JSON line:
// ms/step median (min, max), peak RSS (getrusage ru_maxrss), parameters, the
// model FLOPs of a step and the utilisation of the measured fp32 peak
// (bench/kernels/core_peak.h, on --threads cores):
//   FLOPs/step = (6 N + 12 L C T) x B x T
// with N the parameters without the position embedding, L layers, C width,
// T tokens per sequence, B sequences (nanoGPT's estimate_mfu, after PaLM's
// appendix B: 6 N per token for the weights' forward and backward, 12 L C T
// per token for attention's QK^T and AV products forward and backward).
//
// --ddp: one rank of DistributedDataParallel (native backend, env://), started
// by `cohort run --nproc-per-node P bench_gpt --ddp ...`: every rank trains
// --batch sequences of its own per step (the global batch is P x B); rank 0
// prints the JSON line (its ms/step, its peak RSS; FLOPs and MFU over all
// ranks against the peak of P x --threads cores).
//
// --precision bf16: each step's forward and backward under the bf16
// PrecisionPolicy (autograd/precision.h; --bf16-path emulated|onednn, default
// the best this CPU runs), AdamW on the float32 master weights; --grad-reduce
// bf16: DDP reduces the gradients in bf16. "graph_mib" is what the autograd
// graph holds between forward and backward (Storage::live_bytes after the
// last timed forward minus before it: saved activations, bf16 copies, loss).
//
// Usage: bench_gpt [--preset ref|gpt2] [--n-layer L] [--n-head H] [--n-embd C]
//                  [--block-size T] [--vocab V] [--batch B] [--seq T]
//                  [--steps N] [--warmup N] [--threads N] [--seed S] [--ddp]
//                  [--precision fp32|bf16] [--bf16-path P] [--grad-reduce fp32|bf16]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/kernels/core_peak.h"
#include "bench/kernels/interleaved_timing.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/optim.h"
#include "cohort/parallel/distributed_data_parallel.h"

using namespace cohort;

int main(int argc, char** argv) {
  nn::GPTConfig config = nn::GPTConfig::reference();
  bench::StepFlags timing{.batch = 16, .steps = 10, .warmup = 2, .threads = 2};
  int64_t seq = 0;
  uint64_t seed = 1337;
  bool ddp = false;
  ComputePrecision precision = ComputePrecision::kFloat32, grad_reduce = ComputePrecision::kFloat32;
  native::Bf16Path bf16_path = native::best_bf16_path();
  bench::Args args(argc, argv,
                   "bench_gpt [--preset ref|gpt2] [--n-layer L] [--n-head H] [--n-embd C] "
                   "[--block-size T] [--vocab V] [--batch B] [--seq T] [--steps N] [--warmup N] "
                   "[--threads N] [--seed S] [--ddp] [--precision fp32|bf16] "
                   "[--bf16-path emulated|onednn] [--grad-reduce fp32|bf16]");
  while (args.next()) {
    if (timing.read(args)) {
      continue;
    } else if (args.is("--ddp")) {
      ddp = true;
    } else if (args.is("--preset")) {
      const std::string v = args.value();
      if (v == "ref")
        config = nn::GPTConfig::reference();
      else if (v == "gpt2")
        config = nn::GPTConfig::gpt2();
      else
        args.fail("--preset " + v + ": expected ref or gpt2");
    } else if (args.is("--n-layer")) {
      config.n_layer = args.integer();
    } else if (args.is("--n-head")) {
      config.n_head = args.integer();
    } else if (args.is("--n-embd")) {
      config.n_embd = args.integer();
    } else if (args.is("--block-size")) {
      config.block_size = args.integer();
    } else if (args.is("--vocab")) {
      config.vocab_size = args.integer();
    } else if (args.is("--seq")) {
      seq = args.integer();
    } else if (args.is("--precision")) {
      precision = parse_precision(args.value());
    } else if (args.is("--bf16-path")) {
      bf16_path = native::parse_bf16_path(args.value());
    } else if (args.is("--grad-reduce")) {
      grad_reduce = parse_precision(args.value());
    } else if (args.is("--seed")) {
      seed = static_cast<uint64_t>(args.integer());
    } else {
      args.unknown();
    }
  }
  const int64_t batch = timing.batch;
  const int steps = timing.steps, warmup = timing.warmup, threads = timing.threads;
  if (seq <= 0) seq = config.block_size;
  if (steps < 1 || batch < 1 || threads < 1)
    args.fail("--steps, --batch and --threads must be >= 1");
  config.validate();
  set_num_threads(threads);

  std::shared_ptr<distributed::ProcessGroup> pg;
  if (ddp) pg = distributed::init_process_group("native", "env://");
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;

  Generator gen(seed);  // the same initial weights on every rank
  auto model = std::make_shared<nn::GPT>(config, gen);
  std::unique_ptr<parallel::DistributedDataParallel> wrapped;
  parallel::DistributedDataParallelOptions ddp_options;
  if (grad_reduce == ComputePrecision::kBFloat16) ddp_options.reduce_dtype = DType::kBFloat16;
  if (pg) wrapped = std::make_unique<parallel::DistributedDataParallel>(model, pg, ddp_options);
  const PrecisionPolicy policy = precision == ComputePrecision::kBFloat16
                                     ? PrecisionPolicy::bf16(bf16_path)
                                     : PrecisionPolicy::fp32();
  const nn::WeightDecayGroups groups = nn::weight_decay_groups(*model);
  optim::AdamW opt(groups.decay, {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1});
  opt.add_param_group(groups.no_decay, {{"weight_decay", 0.0}});
  const int64_t params = model->num_parameters();
  const int64_t params_no_pos = params - config.block_size * config.n_embd;

  Generator data(seed + 1 + static_cast<uint64_t>(rank));  // each rank its own batches
  size_t graph_bytes = 0;
  auto step = [&] {
    Tensor idx = randint(0, config.vocab_size, {batch, seq}, data);
    Tensor tgt = randint(0, config.vocab_size, {batch, seq}, data);
    PrecisionScope scope(policy);
    const size_t before = Storage::live_bytes();
    Tensor loss = wrapped ? cross_entropy(wrapped->forward(idx).reshape({-1, config.vocab_size}),
                                          tgt.reshape({-1}))
                          : model->forward(idx, tgt);
    graph_bytes = Storage::live_bytes() - before;
    opt.zero_grad(true);
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  for (int s = 0; s < warmup; ++s) step();
  if (pg) pg->barrier();
  std::vector<double> ms;
  float last = 0;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    last = step();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (pg) pg->barrier();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double tokens = static_cast<double>(batch) * seq * world;
  const double flops = (6.0 * params_no_pos + 12.0 * config.n_layer * config.n_embd * seq) * tokens;
  const double med = bench::median(ms);
  // Measured after the steps, so that the FMA loop runs on a warm core.
  // Rank 0 alone (the others wait at the barrier): the peak of all ranks' cores.
  const bench::FmaPeak peak =
      rank == 0 ? bench::measure_fma_peak(threads * world) : bench::FmaPeak{};
  if (pg) {
    pg->barrier();
    distributed::destroy_process_group(pg);
  }
  if (rank != 0) return 0;
  std::printf(
      "{\"impl\": \"cohort\", \"precision\": \"%s\", \"bf16_path\": \"%s\", "
      "\"grad_reduce\": \"%s\", \"graph_mib\": %.1f, \"ranks\": %d, \"threads\": %d, "
      "\"n_layer\": %lld, "
      "\"n_head\": %lld, \"n_embd\": %lld, \"block_size\": %lld, \"vocab\": %lld, \"batch\": %lld, "
      "\"seq\": %lld, \"params\": %lld, \"steps\": %d, \"ms_step\": %.2f, \"ms_min\": %.2f, "
      "\"ms_max\": %.2f, \"loss_last\": %.4f, \"peak_rss_mib\": %.1f, \"gflop_step\": %.3f, "
      "\"peak_gflops\": %.1f, \"peak_gflops_core\": %.1f, \"mfu\": %.4f, \"cpu\": \"%s\", "
      "\"kernel_path\": \"%s\"}\n",
      precision_name(precision),
      precision == ComputePrecision::kBFloat16 ? native::bf16_path_name(bf16_path) : "-",
      precision_name(grad_reduce), graph_bytes / 1048576.0, world, threads,
      (long long)config.n_layer, (long long)config.n_head, (long long)config.n_embd,
      (long long)config.block_size, (long long)config.vocab_size, (long long)batch, (long long)seq,
      (long long)params, steps, med, *std::min_element(ms.begin(), ms.end()),
      *std::max_element(ms.begin(), ms.end()), last, ru.ru_maxrss / 1024.0, flops * 1e-9,
      peak.all_cores * 1e-9, peak.per_core * 1e-9, flops / (med * 1e-3) / peak.all_cores,
      cpu_features().model.c_str(), kernel_path_name(kernel_path()));
  return 0;
}
