// bench/parameter_server: the tutorials' argument for all-reduce, measured.
//
// Scaling: for W = 2, 4, 8 workers over TCP (loopback), training --model mlp
// (784 -> 4 x 1024 -> 10, 16.5 MB of float32 weights) with a small batch
// per worker so that communication matters, one run per layout:
//   ring     DistributedDataParallel (ring all-reduce), W processes;
//   ps 1     one parameter server + W trainers (W + 1 processes);
//   ps W     W servers + W trainers, each server holding 1/W of the model
//            (BytePS's point: spare processes as summation servers).
// It prints, per step, the bytes the busiest process sent + received (what
// really crossed its TCP sockets, from TCP_INFO: tcp_traffic.h), the theory
// (sent + received: ring 4 (W-1)/W x the model per rank, each direction about
// twice the model; one server: 2 W x the model; W
// servers: each trainer sends and receives the model once = 2 x), and the
// step time.
//
// Straggler: 4 trainers and one server on a smaller MLP (width 256), one
// trainer made 2x slower (it sleeps as long as it computed), sync vs ssp
// (staleness 3) vs async: the time until trainer 0's running training loss
// (EMA) falls below a fixed value, and the steps each trainer took.
//
//   build/bench/parameter_server/bench_ps [--workers 2,4,8] [--steps 4] [--target 0.05]
//       [--skip-scaling] [--skip-straggler]
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/parameter_server/tcp_traffic.h"
#include "bench/rank_results.h"
#include "cohort/base/cpu.h"
#include "cohort/base/error.h"
#include "cohort/data/synthetic_dataset.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/parameter_server/parameter_server_client.h"
#include "cohort/parallel/parameter_server/parameter_server_service.h"
#include "cohort/parallel/parameter_server/ps_layout.h"
#include "cohort/rpc/rpc_agent.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

namespace {

using bench::read_results;
using bench::Results;
using bench::write_results;

constexpr int64_t kBatch = 16;  // per worker: small, so communication matters

std::pair<Tensor, Tensor> batch(int rank) {
  Generator gen(100 + static_cast<uint64_t>(rank));
  return {rand({kBatch, 1, 28, 28}, gen), randint(0, 10, {kBatch}, gen)};
}

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs warm-up + `steps` measured steps; records bytes and time per step.
template <typename Step, typename Barrier>
Results measure(int steps, Step&& step, Barrier&& barrier) {
  step();
  barrier();
  bench::TcpTraffic before = bench::tcp_traffic();
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double secs = seconds(t0);
  bench::TcpTraffic after = bench::tcp_traffic();
  barrier();
  return {{"bytes",
           static_cast<double>((after.sent - before.sent) + (after.received - before.received)) /
               steps},
          {"step_ms", 1000.0 * secs / steps}};
}

void ring_worker(int steps, const std::string& dir, int rank) {
  auto pg = distributed::init_process_group("native", "env://");
  Generator gen(0);
  auto model = nn::make_mlp(gen);
  parallel::DistributedDataParallel ddp(model, pg);
  optim::SGD opt(ddp.parameters(), {.lr = 0.01});
  auto [x, y] = batch(rank);
  Results r = measure(
      steps,
      [&] {
        opt.zero_grad();
        nll_loss(ddp.forward(x), y).backward();
        opt.step();
      },
      [&] { pg->barrier({}); });
  write_results(dir, rank, r);
  distributed::destroy_process_group(pg);
}

// Servers are ranks 0..servers-1, trainers the rest.
void ps_worker(int steps, int servers, const std::string& dir, int rank,
               const parallel::ParameterServerOptions& po) {
  const int world = std::stoi(std::getenv("WORLD_SIZE"));
  const int trainers = world - servers;
  rpc::RpcOptions ro;
  ro.force_tcp = true;
  ro.num_handler_threads = parallel::ps_handler_threads(trainers);
  std::string name =
      rank < servers ? "ps" + std::to_string(rank) : "trainer" + std::to_string(rank - servers);
  auto agent = rpc::init_rpc(name, ro);
  auto layout = parallel::first_ranks_serve(parallel::worker_names(*agent), servers);
  Generator gen(0);
  std::shared_ptr<nn::Module> model = nn::make_mlp(gen);
  auto make_opt = [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.01});
  };
  if (rank < servers) {
    auto service = parallel::serve_parameter_server(agent, *model, layout.servers, layout.trainers,
                                                    rank, make_opt, po);
    bench::TcpTraffic before = bench::tcp_traffic();
    auto t0 = Clock::now();
    service->wait_done(std::chrono::minutes(10));
    bench::TcpTraffic after = bench::tcp_traffic();
    const int64_t pushes = service->server().stats().pushes;
    const double per_step = static_cast<double>(std::max<int64_t>(1, pushes / trainers));
    write_results(dir, rank,
                  {{"bytes", static_cast<double>((after.sent - before.sent) +
                                                 (after.received - before.received)) /
                                 per_step},
                   {"step_ms", 1000.0 * seconds(t0) / per_step}});
  } else {
    parallel::ParameterServerClient client(agent, model, layout.servers, rank - servers);
    auto [x, y] = batch(rank);
    Results r = measure(
        steps,
        [&] {
          client.pull();
          model->zero_grad();
          nll_loss(model->forward(x), y).backward();
          client.push();
        },
        [] {});
    client.finish();
    write_results(dir, rank, r);
  }
  agent->shutdown();
}

// Trains until trainer 0's EMA loss < target; one trainer (the last) sleeps
// as long as it computed, so it runs at half speed.
void straggler_worker(const std::string& dir, int rank, const parallel::ParameterServerOptions& po,
                      double target) {
  const int world = std::stoi(std::getenv("WORLD_SIZE"));
  const int trainers = world - 1;
  rpc::RpcOptions ro;
  ro.force_tcp = true;
  ro.num_handler_threads = parallel::ps_handler_threads(trainers);
  auto agent = rpc::init_rpc(rank == 0 ? "ps0" : "trainer" + std::to_string(rank - 1), ro);
  auto layout = parallel::first_ranks_serve(parallel::worker_names(*agent), 1);
  Generator gen(0);
  std::shared_ptr<nn::Module> model = nn::make_mlp(gen, {.width = 256, .hidden_layers = 2});
  auto make_opt = [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(p),
                                        optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  };
  if (rank == 0) {
    auto service = parallel::serve_parameter_server(agent, *model, layout.servers, layout.trainers,
                                                    0, make_opt, po);
    service->wait_done(std::chrono::minutes(10));
    write_results(dir, rank,
                  {{"max_gap", static_cast<double>(service->server().stats().max_clock_gap)}});
  } else {
    const int me = rank - 1;
    parallel::ParameterServerClient client(agent, model, layout.servers, me);
    data::SyntheticDataset::Options so;
    so.size = 4096;
    so.input_shape = {1, 28, 28};
    so.num_classes = 10;
    so.seed = 5;
    data::SyntheticDataset data(so);
    const bool slow = me == trainers - 1;
    double ema = -1;
    int64_t step = 0;
    double reached = -1;
    auto t0 = Clock::now();
    const int64_t max_steps = 400;
    while (step < max_steps) {
      const int64_t at = ((step * trainers + me) * 32) % (so.size - 32);
      Tensor x = data.inputs().narrow(0, at, 32), y = data.targets().narrow(0, at, 32);
      client.pull();
      auto c0 = Clock::now();
      model->zero_grad();
      Tensor loss = nll_loss(model->forward(x), y);
      loss.backward();
      if (slow) std::this_thread::sleep_for(Clock::now() - c0);
      client.push();
      ++step;
      const double l = loss.item<double>();
      ema = ema < 0 ? l : 0.9 * ema + 0.1 * l;
      if (ema < target) {
        // Each trainer stops when its own running loss is there; the
        // reported time is trainer 0's.
        reached = seconds(t0);
        break;
      }
    }
    client.finish();
    write_results(dir, rank, {{"seconds", reached}, {"steps", static_cast<double>(step)}});
  }
  agent->shutdown();
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

std::string mib(double bytes) { return fmt::format("{:.1f}", bytes / (1 << 20)); }

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<int> workers = {2, 4, 8};
    int steps = 4;
    bool straggler = true, scaling = true;
    double target = 0.05;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--workers" && i + 1 < argc) {
        workers = parse_list(argv[++i]);
      } else if (a == "--steps" && i + 1 < argc) {
        steps = std::stoi(argv[++i]);
      } else if (a == "--skip-straggler") {
        straggler = false;
      } else if (a == "--skip-scaling") {
        scaling = false;
      } else if (a == "--target" && i + 1 < argc) {
        target = std::stod(argv[++i]);
      } else {
        throw InvalidArgument(fmt::format(
            "unknown argument '{}' (expected --workers 2,4,8, --steps N, --target LOSS, "
            "--skip-scaling, --skip-straggler)",
            a));
      }
    }
    const CpuFeatures& cpu = cpu_features();
    Generator g0(0);
    const double model_bytes = static_cast<double>(nn::make_mlp(g0)->num_parameters()) * 4;
    std::printf(
        "bench_ps: %s, %u cores; --model mlp (%s MiB of weights), batch %lld per "
        "worker, %d steps, TCP over loopback\n\n",
        cpu.model.c_str(), std::thread::hardware_concurrency(), mib(model_bytes).c_str(),
        static_cast<long long>(kBatch), steps);
    std::printf("%-8s %-10s %9s %22s %14s %12s\n", "workers", "layout", "processes",
                "busiest MiB/step", "theory MiB", "step ms");
    const std::string root =
        (std::filesystem::temp_directory_path() / ("cohort-bench-ps-" + std::to_string(::getpid())))
            .string();
    SpawnOptions tcp;
    tcp.extra_env = {{"COHORT_TRANSPORT", "tcp"}};
    auto report = [&](int w, const std::string& layout, int procs, const std::string& dir,
                      double theory) {
      double busiest = 0, step_ms = 0;
      int who = 0;
      for (int r = 0; r < procs; ++r) {
        Results rr = read_results(dir, r);
        if (rr["bytes"] > busiest) {
          busiest = rr["bytes"];
          who = r;
        }
        step_ms = std::max(step_ms, rr["step_ms"]);
      }
      std::printf("%-8d %-10s %9d %15s (rank %d) %14s %12.1f\n", w, layout.c_str(), procs,
                  mib(busiest).c_str(), who, mib(theory).c_str(), step_ms);
      std::fflush(stdout);
    };
    for (int w : scaling ? workers : std::vector<int>{}) {
      std::string dir = root + "/ring" + std::to_string(w);
      std::filesystem::create_directories(dir);
      spawn([&](int rank) { ring_worker(steps, dir, rank); }, w, tcp);
      report(w, "ring", w, dir, 4.0 * (w - 1) / w * model_bytes);
      parallel::ParameterServerOptions sync;
      sync.mode = parallel::PsMode::kSync;
      for (int servers : {1, w}) {
        dir = root + "/ps" + std::to_string(servers) + "-" + std::to_string(w);
        std::filesystem::create_directories(dir);
        spawn([&](int rank) { ps_worker(steps, servers, dir, rank, sync); }, servers + w, tcp);
        const double theory = servers == 1 ? 2.0 * w * model_bytes : 2.0 * model_bytes;
        report(w, "ps " + std::to_string(servers), servers + w, dir, theory);
        if (w == 1) break;
      }
    }
    if (straggler) {
      std::printf(
          "\nstraggler: 1 server + 4 trainers, trainer 3 at half speed; MLP width 256; "
          "time until trainer 0's EMA loss < %.2f\n",
          target);
      std::printf("%-10s %10s %22s %10s\n", "mode", "seconds", "steps per trainer", "max gap");
      for (auto [name, mode, s] : {std::tuple{"sync", parallel::PsMode::kSync, int64_t{0}},
                                   std::tuple{"ssp s=3", parallel::PsMode::kSsp, int64_t{3}},
                                   std::tuple{"async", parallel::PsMode::kAsync, int64_t{0}}}) {
        parallel::ParameterServerOptions po;
        po.mode = mode;
        po.staleness = s;
        std::string dir = root + "/straggler-" + std::to_string(static_cast<int>(mode));
        std::filesystem::create_directories(dir);
        spawn([&](int rank) { straggler_worker(dir, rank, po, target); }, 5, tcp);
        std::string per;
        for (int r = 1; r < 5; ++r) {
          per += fmt::format("{}{:.0f}", r > 1 ? "/" : "", read_results(dir, r)["steps"]);
        }
        const double secs = read_results(dir, 1)["seconds"];
        std::printf("%-10s %10s %22s %10.0f\n", name,
                    secs < 0 ? "not reached" : fmt::format("{:.2f}", secs).c_str(), per.c_str(),
                    read_results(dir, 0)["max_gap"]);
        std::fflush(stdout);
      }
    }
    std::filesystem::remove_all(root);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ps: %s\n", e.what());
    return 1;
  }
  return 0;
}
