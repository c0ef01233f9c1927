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
// --device cuda[:N] (issue 35): the model, its AdamW state and every batch on
// that GPU (batches drawn on the host, as on the CPU, and copied); each timed
// step ends with the host waiting for the device (synchronize_device) before
// the clock is read, so ms/step is the device's time, not the enqueueing's.
// "peak_gpu_mib" is the caching allocator's peak of allocated bytes over the
// timed steps (reset after the warm-up, as torch.cuda.reset_peak_memory_stats
// then max_memory_allocated: the PyTorch peer's number); "graph_mib" is then
// the device bytes the graph holds. The GPU's bf16 peak is not measured
// here: --peak-tflops X (bench/gpu/bf16_peak.py's figure) is the MFU's
// denominator, and without it "mfu" is null.
//
// Usage: bench_gpt [--preset ref|gpt2] [--n-layer L] [--n-head H] [--n-embd C]
//                  [--block-size T] [--vocab V] [--batch B] [--seq T]
//                  [--steps N] [--warmup N] [--threads N] [--seed S] [--ddp]
//                  [--precision fp32|bf16] [--bf16-path P] [--grad-reduce fp32|bf16]
//                  [--device cpu|cuda[:N]] [--peak-tflops X]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/gpt/gpt_flags.h"
#include "bench/kernels/core_peak.h"
#include "bench/kernels/interleaved_timing.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/core/device.h"
#include "cohort/core/device_runtime.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/optim.h"
#include "cohort/parallel/distributed_data_parallel.h"

using namespace cohort;

namespace {

int run(int argc, char** argv) {
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
                   "[--bf16-path emulated|onednn] [--grad-reduce fp32|bf16] "
                   "[--device cpu|cuda[:N]] [--peak-tflops X]");
  std::string device_spec = "cpu";
  double peak_tflops = 0;
  while (args.next()) {
    if (timing.read(args) || bench::read_gpt_shape(args, config)) {
      continue;
    } else if (args.is("--ddp")) {
      ddp = true;
    } else if (args.is("--seq")) {
      seq = args.integer();
    } else if (args.is("--precision")) {
      precision = parse_precision(args.value());
    } else if (args.is("--bf16-path")) {
      bf16_path = native::parse_bf16_path(args.value());
    } else if (args.is("--grad-reduce")) {
      grad_reduce = parse_precision(args.value());
    } else if (args.is("--device")) {
      device_spec = args.value();
    } else if (args.is("--peak-tflops")) {
      peak_tflops = args.real();
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
  if (peak_tflops < 0) args.fail("--peak-tflops must be >= 0");
  config.validate();
  set_num_threads(threads);
  // Fails here, naming what is missing, where the device layer or the GPU is.
  const Device device = resolve_device(Device(device_spec));
  const bool on_gpu = !device.is_cpu();
  if (on_gpu && ddp) args.fail("--ddp runs on the CPU only (--device " + device.str() + ")");
  DeviceRuntime* rt = on_gpu ? &device_runtime(device, "bench_gpt --device") : nullptr;
  const std::string gpu_name = on_gpu ? rt->properties(device.index()).name : "";
  // Device bytes in use now (the caching allocator's count); host bytes of
  // live Storages on the CPU.
  auto live_bytes = [&]() -> size_t {
    return on_gpu ? rt->memory_stats(device.index()).allocated : Storage::live_bytes();
  };

  std::shared_ptr<distributed::ProcessGroup> pg;
  if (ddp) pg = distributed::init_process_group("native", "env://");
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;

  Generator gen(seed);  // the same initial weights on every rank
  auto model = std::make_shared<nn::GPT>(config, gen);
  model->to(device);  // before the optimizer, as in PyTorch
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
    Tensor idx = randint(0, config.vocab_size, {batch, seq}, data).to(device);
    Tensor tgt = randint(0, config.vocab_size, {batch, seq}, data).to(device);
    PrecisionScope scope(policy);
    const size_t before = live_bytes();
    Tensor loss = wrapped ? cross_entropy(wrapped->forward(idx).reshape({-1, config.vocab_size}),
                                          tgt.reshape({-1}))
                          : model->forward(idx, tgt);
    graph_bytes = live_bytes() - before;
    opt.zero_grad(true);
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  for (int s = 0; s < warmup; ++s) step();
  if (pg) pg->barrier();
  synchronize_device(device, "bench_gpt: after the warm-up");
  if (on_gpu) rt->reset_peak_memory_stats(device.index());
  std::vector<double> ms;
  float last = 0;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    last = step();
    // The clock stops once the device has run the whole step, not on the
    // loss's copy alone (item() waits for that copy and what precedes it).
    synchronize_device(device, "bench_gpt: a timed step");
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (pg) pg->barrier();
  const double peak_gpu_mib =
      on_gpu ? rt->memory_stats(device.index()).peak_allocated / 1048576.0 : 0.0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double tokens = static_cast<double>(batch) * seq * world;
  const double flops = (6.0 * params_no_pos + 12.0 * config.n_layer * config.n_embd * seq) * tokens;
  const double med = bench::median(ms);
  // Measured after the steps, so that the FMA loop runs on a warm core.
  // Rank 0 alone (the others wait at the barrier): the peak of all ranks' cores.
  // On a GPU the peak is --peak-tflops (0: unknown, "mfu" null).
  const bench::FmaPeak peak =
      rank == 0 && !on_gpu ? bench::measure_fma_peak(threads * world) : bench::FmaPeak{};
  const double peak_flops = on_gpu ? peak_tflops * 1e12 : peak.all_cores;
  const std::string mfu =
      peak_flops > 0 ? std::to_string(flops / (med * 1e-3) / peak_flops) : std::string("null");
  if (pg) {
    pg->barrier();
    distributed::destroy_process_group(pg);
  }
  if (rank != 0) return 0;
  std::printf(
      "{\"impl\": \"cohort\", \"device\": \"%s\", \"gpu\": \"%s\", \"precision\": \"%s\", "
      "\"bf16_path\": \"%s\", "
      "\"grad_reduce\": \"%s\", \"graph_mib\": %.1f, \"ranks\": %d, \"threads\": %d, "
      "\"n_layer\": %lld, "
      "\"n_head\": %lld, \"n_embd\": %lld, \"block_size\": %lld, \"vocab\": %lld, \"batch\": %lld, "
      "\"seq\": %lld, \"params\": %lld, \"steps\": %d, \"ms_step\": %.2f, \"ms_min\": %.2f, "
      "\"ms_max\": %.2f, \"loss_last\": %.4f, \"peak_rss_mib\": %.1f, \"peak_gpu_mib\": %.1f, "
      "\"gflop_step\": %.3f, "
      "\"peak_gflops\": %.1f, \"peak_gflops_core\": %.1f, \"mfu\": %s, \"cpu\": \"%s\", "
      "\"kernel_path\": \"%s\"}\n",
      device.str().c_str(), gpu_name.c_str(), precision_name(precision),
      precision == ComputePrecision::kBFloat16 && !on_gpu ? native::bf16_path_name(bf16_path) : "-",
      precision_name(grad_reduce), graph_bytes / 1048576.0, world, threads,
      (long long)config.n_layer, (long long)config.n_head, (long long)config.n_embd,
      (long long)config.block_size, (long long)config.vocab_size, (long long)batch, (long long)seq,
      (long long)params, steps, med, *std::min_element(ms.begin(), ms.end()),
      *std::max_element(ms.begin(), ms.end()), last, ru.ru_maxrss / 1024.0, peak_gpu_mib,
      flops * 1e-9, peak_flops * 1e-9, on_gpu ? 0.0 : peak.per_core * 1e-9, mfu.c_str(),
      cpu_features().model.c_str(), kernel_path_name(kernel_path()));
  return 0;
}

}  // namespace

// A failure (no GPU, a kernel missing on the device, ...) is one line on
// stderr and exit status 1, so run.sh shows why and goes on.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt: %s\n", e.what());
    return 1;
  }
}
