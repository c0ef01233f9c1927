// bench/model_parallel: what splitting a model over processes buys on this
// machine. For --model mlp (784 -> 4 x 1024 -> 10) and Net, one process
// (all cores) against 2 processes (the cores split between them, pinned by
// cohort::spawn) running a 2-stage pipeline with each schedule (GPipe,
// 1F1B, interleaved 1F1B with 2 virtual stages per rank, ZB-H1) and 2-way
// tensor parallelism (parallel/tensor_parallel). Prints steps/s and the
// ratio to one process, each schedule's measured bubble (the share of a
// step a stage spends waiting for its peers) against its theory, the peak
// activations a stage held (micro-batches and MiB) and each rank's peak RSS.
// The peer is one cohort process, measured in the same run.
//
//   build/bench/model_parallel/bench_model_parallel [--steps 20] [--batch 128]
//       [--micro-batches 8] [--models mlp,net]
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/rank_results.h"
#include "cohort/base/cpu.h"
#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/models/net.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/pipeline/pipeline.h"
#include "cohort/parallel/tensor_parallel/clip_grad_tensor_parallel.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_models.h"
#include "cohort/train/workload.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;
namespace pp = cohort::parallel::pipeline;

namespace {

struct Settings {
  int steps = 20;
  int warmup = 3;
  int64_t batch = 128;
  int64_t micro_batches = 8;
  std::vector<std::string> models = {"mlp", "net"};
};

using bench::read_results;
using bench::Results;
using bench::write_results;

double peak_rss_mib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

train::ModelKind kind_of(const std::string& model) { return train::parse_model(model); }

std::pair<Tensor, Tensor> make_batch(int64_t batch) {
  Generator gen(99);
  return {rand({batch, 1, 28, 28}, gen), randint(0, 10, {batch}, gen)};
}

// Times `steps` calls of step() after `warmup` ones; barrier() lines the
// ranks up before the clock starts.
template <typename Step, typename Barrier>
double steps_per_second(const Settings& s, Step&& step, Barrier&& barrier) {
  for (int i = 0; i < s.warmup; ++i) step();
  barrier();
  auto t0 = Clock::now();
  for (int i = 0; i < s.steps; ++i) step();
  barrier();
  return s.steps / std::chrono::duration<double>(Clock::now() - t0).count();
}

void run_single(const Settings& s, const std::string& model, const std::string& dir) {
  Generator gen(0);
  const train::ModelKind kind = kind_of(model);
  auto net = train::make_model(kind, gen);
  auto params = net->parameters();
  train::TrainOptions o;
  o.model = kind;
  auto opt = train::make_optimizer(o, params);
  auto [x, y] = make_batch(s.batch);
  const double clip = train::clip_max_norm(kind);
  double sps = steps_per_second(
      s,
      [&] {
        opt->zero_grad();
        train::compute_loss(kind, net->forward(x), y).backward();
        if (clip > 0) optim::clip_grad_norm(params, clip);
        opt->step();
      },
      [] {});
  write_results(dir, 0, {{"steps_per_s", sps}, {"rss_mib", peak_rss_mib()}});
}

void run_tensor(const Settings& s, const std::string& model, const std::string& dir, int rank) {
  auto pg = distributed::init_process_group("native", "env://");
  Generator gen(0);
  const train::ModelKind kind = kind_of(model);
  auto full = train::make_model(kind, gen);
  nn::ModulePtr split =
      kind == train::ModelKind::kNet
          ? parallel::make_tensor_parallel_net(static_cast<const nn::Net&>(*full), pg)
          : parallel::make_tensor_parallel_mlp(static_cast<const nn::Sequential&>(*full), pg);
  full.reset();
  train::TrainOptions o;
  o.model = kind;
  auto opt = train::make_optimizer(o, split->parameters());
  auto [x, y] = make_batch(s.batch);
  const double clip = train::clip_max_norm(kind);
  double sps = steps_per_second(
      s,
      [&] {
        opt->zero_grad();
        train::compute_loss(kind, split->forward(x), y).backward();
        if (clip > 0) parallel::clip_grad_norm_tensor_parallel(*split, clip, *pg);
        opt->step();
      },
      [&] { pg->barrier({}); });
  write_results(dir, rank, {{"steps_per_s", sps}, {"rss_mib", peak_rss_mib()}});
  distributed::destroy_process_group(pg);
}

void run_pipeline(const Settings& s, const std::string& model, const std::string& schedule,
                  const std::string& dir, int rank) {
  auto pg = distributed::init_process_group("native", "env://");
  Generator gen(0);
  const train::ModelKind kind = kind_of(model);
  auto seq = train::make_sequential_model(kind, gen);
  auto grid = pp::make_pipeline_grid(pg, pg->size());
  auto [x, y] = make_batch(s.batch);
  pp::PipelineOptions po;
  po.schedule = pp::parse_schedule(schedule);
  po.micro_batches = static_cast<int>(s.micro_batches);
  // Cuts balanced by the measured cost of each layer on one micro-batch.
  po.sample_input = x.narrow(0, 0, s.batch / s.micro_batches).contiguous();
  pp::Pipeline pipe(seq, grid, po);
  train::TrainOptions o;
  o.model = kind;
  // The whole model's parameters: the other stages' never get a gradient, so
  // the optimizer skips them (and a stage of parameter-free layers needs no
  // special case).
  auto opt = train::make_optimizer(o, seq->parameters());
  auto loss_fn = [kind](const Tensor& out, const Tensor& target) {
    return train::compute_loss(kind, out, target);
  };
  const double clip = train::clip_max_norm(kind);
  double total = 0, busy = 0;
  int peak_in_flight = 0;
  int64_t peak_bytes = 0;
  double sps = steps_per_second(
      s,
      [&] {
        opt->zero_grad();
        pipe.step(x, y, loss_fn);
        if (clip > 0) pipe.clip_grad_norm(clip);
        opt->step();
        const pp::PipelineStats& st = pipe.last_stats();
        total += st.step_seconds;
        busy += st.compute_seconds;
        peak_in_flight = std::max(peak_in_flight, st.peak_in_flight);
        peak_bytes = std::max(peak_bytes, st.peak_activation_bytes);
      },
      [&] { pg->barrier({}); });
  write_results(dir, rank,
                {{"steps_per_s", sps},
                 {"rss_mib", peak_rss_mib()},
                 {"bubble", 1.0 - busy / std::max(1e-12, total)},
                 {"theory", pp::theoretical_bubble_fraction(po.schedule, pg->size(),
                                                            po.micro_batches, pipe.chunks())},
                 {"peak_act", static_cast<double>(peak_in_flight)},
                 {"peak_act_mib", static_cast<double>(peak_bytes) / (1 << 20)}});
  distributed::destroy_process_group(pg);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

Settings parse(int argc, char** argv) {
  Settings s;
  bench::Args args(argc, argv,
                   "bench_model_parallel [--steps N] [--batch N] [--micro-batches N] "
                   "[--models mlp,net]");
  while (args.next()) {
    if (args.is("--steps")) {
      s.steps = static_cast<int>(args.integer());
    } else if (args.is("--batch")) {
      s.batch = args.integer();
    } else if (args.is("--micro-batches")) {
      s.micro_batches = args.integer();
    } else if (args.is("--models")) {
      s.models = split_list(args.value());
    } else {
      args.unknown();
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Settings s = parse(argc, argv);
    const CpuFeatures& cpu = cpu_features();
    std::printf(
        "bench_model_parallel: %s, %u cores, kernels %s; batch %lld, %lld micro-batches, "
        "%d steps (after %d)\n",
        cpu.model.c_str(), std::thread::hardware_concurrency(),
        std::string(kernel_path_name(kernel_path())).c_str(), static_cast<long long>(s.batch),
        static_cast<long long>(s.micro_batches), s.steps, s.warmup);
    const std::string root =
        (std::filesystem::temp_directory_path() / ("cohort-bench-mp-" + std::to_string(getpid())))
            .string();
    for (const std::string& model : s.models) {
      std::printf("\n--model %s\n", model.c_str());
      std::printf("%-26s %9s %8s %9s %9s %10s %12s %14s\n", "config", "steps/s", "vs 1 proc",
                  "bubble", "theory", "peak act", "peak act MiB", "peak RSS MiB");
      double base = 0;
      auto report = [&](const std::string& name, int ranks, const std::string& dir) {
        Results r0 = read_results(dir, 0);
        if (base == 0) base = r0["steps_per_s"];
        std::string rss, act, act_mib, bubble;
        for (int r = 0; r < ranks; ++r) {
          Results rr = read_results(dir, r);
          rss += fmt::format("{}{:.0f}", r ? "/" : "", rr["rss_mib"]);
          if (rr.count("bubble")) {
            bubble += fmt::format("{}{:.2f}", r ? "/" : "", rr["bubble"]);
            act += fmt::format("{}{:.0f}", r ? "/" : "", rr["peak_act"]);
            act_mib += fmt::format("{}{:.1f}", r ? "/" : "", rr["peak_act_mib"]);
          }
        }
        std::string theory = r0.count("theory") ? fmt::format("{:.2f}", r0["theory"]) : "-";
        std::printf("%-26s %9.2f %8.2fx %9s %9s %10s %12s %14s\n", name.c_str(), r0["steps_per_s"],
                    r0["steps_per_s"] / base, bubble.empty() ? "-" : bubble.c_str(), theory.c_str(),
                    act.empty() ? "-" : act.c_str(), act_mib.empty() ? "-" : act_mib.c_str(),
                    rss.c_str());
        std::fflush(stdout);
      };
      auto fresh = [&](const std::string& tag) {
        std::string dir = root + "/" + model + "-" + tag;
        std::filesystem::create_directories(dir);
        return dir;
      };
      std::string d = fresh("single");
      spawn([&](int) { run_single(s, model, d); }, 1);
      report("1 process", 1, d);
      for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
        d = fresh(schedule);
        spawn([&](int rank) { run_pipeline(s, model, schedule, d, rank); }, 2);
        report(fmt::format("pipeline 2 x {}", schedule), 2, d);
      }
      d = fresh("tensor");
      spawn([&](int rank) { run_tensor(s, model, d, rank); }, 2);
      report("tensor parallel 2", 2, d);
    }
    std::filesystem::remove_all(root);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_model_parallel: %s\n", e.what());
    return 1;
  }
  return 0;
}
