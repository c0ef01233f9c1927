// Activation checkpointing's trade (issue 42): GPT training steps (GPT-2
// 124M at B 4, T 1024 by default) without checkpointing and with each mode
// (nn::GPTCheckpointing: every block, or each block's attention; with the
// chunked loss head, GPTConfig::chunked_loss, as `cohort train
// --activation-checkpointing` sets them; --modes chunked-loss adds the head
// alone), on one model whose mode is switched between steps, the
// modes interleaved step by step so that a change in the machine's load
// falls on all of them alike. Per mode:
//   activation_mib: the peak of live host bytes during a step
//     (core/live_bytes_peak.h) above the bytes live when it starts (weights,
//     gradients, AdamW state): saved activations, the recomputation's, and
//     the temporaries of forward and backward;
//   graph_mib: what the graph holds between forward and backward;
//   ms_step: the median of the timed steps (--steps per mode, after
//     --warmup steps of each mode).
// Then each mode's ratios to no checkpointing (memory cut = none / mode, time
// = mode / none) and the target (a cut >= 3x at <= 1.35x the step time),
// the CPU model and the load average at the start. AdamW as bench_gpt's
// (lr 3e-4, betas 0.9/0.95, weight decay 0.1 on 2-D weights).
//
// Usage: bench_activation_checkpointing [--preset gpt2|ref] [--n-layer L]
//            [--batch B] [--seq T] [--steps N] [--warmup N] [--threads N]
//            [--modes none,block,attention,chunked-loss] [--head-rows N] [--seed S]
// (--head-rows: GPTConfig::loss_chunk_rows, 0 its default.)
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
#include "cohort/core/live_bytes_peak.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/optim.h"

using namespace cohort;

namespace {

struct ModeResult {
  nn::GPTCheckpointing mode;
  bool chunked_loss;  // GPTConfig::chunked_loss
  std::vector<double> ms;
  size_t activation_bytes = 0;  // the largest over the timed steps
  size_t graph_bytes = 0;
  float loss = 0;
};

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return f ? a + " " + b + " " + c : std::string("unknown");
}

// "none", "block", "attention" (the checkpointing modes as `cohort train`
// sets them: block and attention with the chunked loss head), and
// "chunked-loss" (no checkpointing, the loss head chunked: what the head
// alone saves and costs). "none" is always the first, the ratios' reference.
std::vector<ModeResult> parse_modes(const std::string& list) {
  std::vector<ModeResult> modes{{nn::GPTCheckpointing::kNone, false, {}, 0, 0, 0}};
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    start = comma + 1;
    if (name == "none") continue;
    if (name == "chunked-loss") {
      modes.push_back({nn::GPTCheckpointing::kNone, true, {}, 0, 0, 0});
    } else {
      modes.push_back({nn::parse_gpt_checkpointing(name), true, {}, 0, 0, 0});
    }
  }
  return modes;
}

std::string mode_name(const ModeResult& r) {
  return r.mode == nn::GPTCheckpointing::kNone && r.chunked_loss
             ? "chunked-loss"
             : nn::gpt_checkpointing_name(r.mode);
}

double mib(size_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

int run(int argc, char** argv) {
  nn::GPTConfig config = nn::GPTConfig::gpt2();
  bench::StepFlags timing{.batch = 4, .steps = 2, .warmup = 1, .threads = 2};
  int64_t seq = 0;
  uint64_t seed = 1337;
  std::string modes_arg = "none,block,attention";
  bench::Args args(argc, argv,
                   "bench_activation_checkpointing [--preset gpt2|ref] [--n-layer L] [--n-head H] "
                   "[--n-embd C] [--block-size T] [--vocab V] [--batch B] "
                   "[--seq T] [--steps N] [--warmup N] [--threads N] "
                   "[--modes none,block,attention,chunked-loss] [--head-rows N] [--seed S]");
  while (args.next()) {
    if (timing.read(args) || bench::read_gpt_shape(args, config)) {
      continue;
    } else if (args.is("--seq")) {
      seq = args.integer();
    } else if (args.is("--head-rows")) {
      config.loss_chunk_rows = args.integer();
    } else if (args.is("--modes")) {
      modes_arg = args.value();
    } else if (args.is("--seed")) {
      seed = static_cast<uint64_t>(args.integer());
    } else {
      args.unknown();
    }
  }
  if (seq <= 0) seq = config.block_size;
  if (timing.steps < 1 || timing.batch < 1 || timing.threads < 1 || timing.warmup < 0)
    args.fail("--steps, --batch and --threads must be >= 1, --warmup >= 0");
  config.validate();
  std::vector<ModeResult> results = parse_modes(modes_arg);
  const std::string load = load_average();
  set_num_threads(timing.threads);

  Generator gen(seed);
  nn::GPT model(config, gen);
  const nn::WeightDecayGroups groups = nn::weight_decay_groups(model);
  optim::AdamW opt(groups.decay, {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1});
  opt.add_param_group(groups.no_decay, {{"weight_decay", 0.0}});
  Generator data(seed + 1);

  auto step = [&](ModeResult& r, bool timed) {
    model.set_checkpointing(r.mode);
    model.set_chunked_loss(r.chunked_loss);
    Tensor idx = randint(0, config.vocab_size, {timing.batch, seq}, data);
    Tensor tgt = randint(0, config.vocab_size, {timing.batch, seq}, data);
    // Gradients stay allocated (zeroed in place) so that the bytes live at
    // the start hold them in every mode after the first step.
    opt.zero_grad(false);
    const size_t start = Storage::live_bytes();
    reset_peak_live_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    Tensor loss = model.forward(idx, tgt);
    const size_t graph = Storage::live_bytes() - start;
    loss.backward();
    opt.step();
    const float l = loss.item<float>();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!timed) return;
    r.ms.push_back(ms);
    r.activation_bytes = std::max(r.activation_bytes, peak_live_bytes() - start);
    r.graph_bytes = std::max(r.graph_bytes, graph);
    r.loss = l;
  };
  for (int s = 0; s < timing.warmup; ++s)
    for (ModeResult& r : results) step(r, false);
  for (int s = 0; s < timing.steps; ++s)
    for (ModeResult& r : results) step(r, true);

  std::printf("activation checkpointing: %s, B %lld, T %lld, %lld parameters, %d threads\n",
              config.str().c_str(), static_cast<long long>(timing.batch),
              static_cast<long long>(seq), static_cast<long long>(model.num_parameters()),
              timing.threads);
  std::printf("cpu: %s; load average at start: %s\n", cpu_features().model.c_str(), load.c_str());
  std::printf("steps: %d warm-up + %d timed per mode, interleaved\n", timing.warmup, timing.steps);
  const ModeResult& none = results.front();
  const double none_ms = bench::median(none.ms);
  for (const ModeResult& r : results) {
    const double ms = bench::median(r.ms);
    const double cut = static_cast<double>(none.activation_bytes) /
                       static_cast<double>(std::max<size_t>(r.activation_bytes, 1));
    const double slow = ms / none_ms;
    std::printf(
        "%-12s activation_mib %9.1f  graph_mib %9.1f  ms_step %10.1f (min %.1f, max %.1f)  "
        "memory cut %.2fx  time %.3fx",
        mode_name(r).c_str(), mib(r.activation_bytes), mib(r.graph_bytes), ms,
        *std::min_element(r.ms.begin(), r.ms.end()), *std::max_element(r.ms.begin(), r.ms.end()),
        cut, slow);
    if (r.mode != nn::GPTCheckpointing::kNone)
      std::printf("  target (>= 3x at <= 1.35x): %s",
                  cut >= 3.0 && slow <= 1.35 ? "met" : "missed");
    std::printf("  loss %.4f\n", r.loss);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_activation_checkpointing: %s\n", e.what());
    return 1;
  }
}
