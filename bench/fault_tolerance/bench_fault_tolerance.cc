// bench_fault_tolerance: data-parallel training through failures
// (parallel/fault_tolerance/replica_manager.h) on one host. R replicas, each
// a process, train Net or a small GPT on synthetic data for D seconds with
// no fault (the baseline), then for D seconds while a random replica is
// SIGKILLed every S seconds and at once restarted as a fresh process with
// other initial weights (the launcher's part), which receives the state from
// a live peer. Prints, in the same run:
//   step efficiency  committed steps with faults / without, in the same time,
//                    next to the theoretical value 1 - kills x T / D (each
//                    kill costs at least the step in flight, T the baseline's
//                    mean step time);
//   recovery         a kill -> the survivors' next committed step (median, worst);
//   rejoin           a replacement's start -> its first committed step;
//   samples          committed samples with faults / without;
//   hangs, leftovers phases that did not end, processes left.
// and the CPU. The quorum service runs in a process of its own. With
// --two-hosts (root: network namespaces, tests/multihost/two_hosts.h) the
// service and the first half of the replicas run on host 0, the rest on host
// 1, their groups over the veth link (TCP).
//
//   bench_fault_tolerance [--model net|gpt] [--replicas 4] [--seconds 60]
//                         [--kill-every 5] [--batch 16] [--seed 1] [--two-hosts]
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "bench/bench_args.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/fault_tolerance/replica_manager.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "cohort/transport/socket.h"
#include "tests/multihost/two_hosts.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr const char* kToken = "bench-ft";

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

struct Config {
  std::string model = "net";
  int replicas = 4;
  double seconds = 60;
  double kill_every = 5;
  int64_t batch = 16;
  uint64_t seed = 1;
  bool two_hosts = false;
};

// Where the processes run: this host, or two network namespaces.
struct Hosts {
  const test::TwoHosts* two = nullptr;
  std::string service_ip = "127.0.0.1";
  // The namespace of replica r (half on each host), or "" for this one.
  std::string ns_of(int r, int replicas) const {
    return two == nullptr ? "" : two->ns(r < replicas / 2 ? 0 : 1);
  }
};

// In a forked child: enters network namespace `ns` ("" stays).
void enter(const std::string& ns) {
  if (ns.empty()) return;
  const int fd = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0)
    throw Error(fmt::format("bench_fault_tolerance: cannot enter network namespace {}", ns));
  ::close(fd);
}

// A replica: trains until <dir>/stop exists; appends "commit <ns> <step> <n>"
// per committed step to <dir>/<id>.<incarnation>.events.
int replica(const Config& c, const std::string& id, int incarnation, uint16_t port,
            const fs::path& dir, const Hosts& hosts, const std::string& ns) {
  enter(ns);
  set_num_threads(1);
  FILE* events = std::fopen((dir / fmt::format("{}.{}.events", id, incarnation)).c_str(), "w");
  std::fprintf(events, "start %lld\n", static_cast<long long>(now_ns()));
  std::fflush(events);
  Generator gen(incarnation == 0 ? 7 : 1000 + static_cast<uint64_t>(incarnation));
  nn::GPTConfig gc{.n_layer = 2, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 256};
  nn::ModulePtr model;
  std::shared_ptr<nn::GPT> gpt;
  if (c.model == "gpt") {
    gpt = std::make_shared<nn::GPT>(gc, gen);
    model = gpt;
  } else {
    model = nn::make_net_sequential(gen);
  }
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  int64_t cursor = 0;
  parallel::ReplicaManager m(
      {.replica_id = id,
       .store_host = hosts.service_ip,
       .store_port = port,
       .token = std::string(kToken),
       .initial_replicas = incarnation == 0 ? c.replicas : 0,
       .quorum_timeout = std::chrono::seconds(30),
       .join_timeout = std::chrono::milliseconds(300),
       .op_timeout = std::chrono::seconds(5),
       .heartbeat_interval = std::chrono::milliseconds(50),
       .heartbeat_timeout = std::chrono::milliseconds(500),
       .group_options = {.transport = hosts.two != nullptr ? collectives::TransportKind::kTcp
                                                           : collectives::TransportKind::kAuto},
       .state_dict =
           [&] {
             TensorDict s;
             for (const auto& [name, p] : model->named_parameters())
               s.insert("model." + name, p.detach());
             s.merge(opt.state_dict(), "optim.");
             s.insert("cursor", Tensor::from_vector<int64_t>({cursor}));
             return s;
           },
       .load_state_dict =
           [&](const TensorDict& s) {
             NoGradGuard no_grad;
             for (const auto& [name, p] : model->named_parameters())
               const_cast<Tensor&>(p).copy_(s.at("model." + name));
             opt.load_state_dict(s.sub("optim."));
             cursor = s.at("cursor").to_vector<int64_t>()[0];
           },
       .log = [](const std::string&) {}});
  while (!fs::exists(dir / "stop")) {
    m.start_step();
    const int n = m.num_participants();
    // Samples [cursor + rank B, cursor + (rank + 1) B) of the global order.
    Generator g(static_cast<uint64_t>(cursor + m.rank() * c.batch) * 7919 + 13);
    opt.zero_grad();
    Tensor loss;
    if (gpt) {
      Tensor idx = randint(0, gc.vocab_size, {c.batch, gc.block_size}, g);
      loss = gpt->forward(idx, idx);
    } else {
      Tensor x = randn({c.batch, 1, 28, 28}, g);
      Tensor y = randint(0, 10, {c.batch}, g);
      loss = cross_entropy(model->forward(x), y);
    }
    loss.backward();
    std::vector<Tensor> grads;
    for (Tensor& p : model->parameters()) grads.push_back(p.grad());
    m.all_reduce_average(grads);
    if (!m.should_commit()) continue;
    opt.step();
    cursor += n * c.batch;
    std::fprintf(events, "commit %lld %lld %d\n", static_cast<long long>(now_ns()),
                 static_cast<long long>(m.step()), n);
    std::fflush(events);
  }
  std::fclose(events);
  return 0;
}

pid_t fork_run(const std::function<int()>& fn) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 1;
  try {
    code = fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fault_tolerance: child %d: %s\n", ::getpid(), e.what());
    code = 3;
  }
  std::fflush(nullptr);
  ::_exit(code);
}

struct Phase {
  int64_t t0 = 0, t1 = 0;
  std::map<int64_t, int64_t> commits;  // step -> first commit time
  std::map<int64_t, int> participants;
  std::vector<int64_t> kills;                        // times
  std::vector<std::pair<int64_t, int64_t>> rejoins;  // start, first commit
  int hangs = 0, leftovers = 0, failed = 0;
};

// Runs one phase of `seconds` with kills every `kill_every` s (0: none).
Phase run_phase(const Config& c, double kill_every, const fs::path& dir, std::mt19937& rng,
                const Hosts& hosts) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The service binds in host 0's namespace and says its port through a file.
  const fs::path port_file = dir / "port";
  const pid_t service = fork_run([&] {
    enter(hosts.ns_of(0, c.replicas));
    rendezvous::TcpStoreServer server(
        {.bind_host = hosts.service_ip, .token = std::string(kToken)});
    std::ofstream(port_file.string() + ".tmp") << server.port();
    fs::rename(port_file.string() + ".tmp", port_file);
    while (true) std::this_thread::sleep_for(std::chrono::hours(1));
    return 0;
  });
  for (int i = 0; i < 1000 && !fs::exists(port_file); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  uint16_t port = 0;
  std::ifstream(port_file) >> port;
  if (port == 0) throw Error("bench_fault_tolerance: the quorum service did not start");
  Phase p;
  std::vector<pid_t> pids(static_cast<size_t>(c.replicas));
  std::vector<int> incarnation(static_cast<size_t>(c.replicas), 0);
  std::vector<std::pair<std::string, int>> started;  // id, incarnation (replacements)
  int next_incarnation = 1;
  for (int r = 0; r < c.replicas; ++r)
    pids[static_cast<size_t>(r)] = fork_run([&c, r, port, &dir, &hosts] {
      return replica(c, "r" + std::to_string(r), 0, port, dir, hosts, hosts.ns_of(r, c.replicas));
    });
  p.t0 = now_ns();
  const auto end = Clock::now() + std::chrono::duration<double>(c.seconds);
  auto next_kill = Clock::now() + std::chrono::duration<double>(kill_every);
  while (Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (kill_every <= 0 || Clock::now() < next_kill) continue;
    next_kill += std::chrono::duration<double>(kill_every);
    const int r = static_cast<int>(rng() % static_cast<uint32_t>(c.replicas));
    ::kill(pids[static_cast<size_t>(r)], SIGKILL);
    p.kills.push_back(now_ns());
    ::waitpid(pids[static_cast<size_t>(r)], nullptr, 0);
    const int inc = next_incarnation++;
    incarnation[static_cast<size_t>(r)] = inc;
    started.emplace_back("r" + std::to_string(r), inc);
    pids[static_cast<size_t>(r)] = fork_run([&c, r, inc, port, &dir, &hosts] {
      return replica(c, "r" + std::to_string(r), inc, port, dir, hosts, hosts.ns_of(r, c.replicas));
    });
  }
  p.t1 = now_ns();
  std::ofstream(dir / "stop") << "";
  for (pid_t pid : pids) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ++p.hangs;
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++p.failed;
  }
  ::kill(service, SIGKILL);
  ::waitpid(service, nullptr, 0);
  if (::waitpid(-1, nullptr, WNOHANG) > 0) ++p.leftovers;
  // Every incarnation's events.
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".events") continue;
    std::ifstream f(e.path());
    std::string kind;
    int64_t start = 0, first_commit = -1;
    while (f >> kind) {
      if (kind == "start") {
        f >> start;
      } else if (kind == "commit") {
        int64_t t = 0, step = 0;
        int n = 0;
        f >> t >> step >> n;
        if (t > p.t1) continue;  // after the phase's end
        if (!p.commits.count(step) || p.commits[step] > t) p.commits[step] = t;
        p.participants[step] = n;
        if (first_commit < 0) first_commit = t;
      }
    }
    const std::string name = e.path().stem().string();  // rX.N
    if (name.substr(name.find('.') + 1) != "0") p.rejoins.emplace_back(start, first_commit);
  }
  return p;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  Config c;
  bench::Args args(argc, argv,
                   "bench_fault_tolerance [--model net|gpt] [--replicas R] [--seconds D] "
                   "[--kill-every S] [--batch B] [--seed N] [--two-hosts]");
  while (args.next()) {
    if (args.is("--model")) {
      c.model = args.value();
      if (c.model != "net" && c.model != "gpt") args.fail("--model: expected net or gpt");
    } else if (args.is("--replicas")) {
      c.replicas = static_cast<int>(args.integer());
    } else if (args.is("--seconds")) {
      c.seconds = args.real();
    } else if (args.is("--kill-every")) {
      c.kill_every = args.real();
    } else if (args.is("--batch")) {
      c.batch = args.integer();
    } else if (args.is("--seed")) {
      c.seed = static_cast<uint64_t>(args.integer());
    } else if (args.is("--two-hosts")) {
      c.two_hosts = true;
    } else {
      args.unknown();
    }
  }
  std::mt19937 rng(static_cast<uint32_t>(c.seed));
  const fs::path root = fs::temp_directory_path() / fmt::format("bench_ft_{}", ::getpid());
  // The fault-free phase runs before and after the faulty one, and counts
  // their mean, so that a drift of the machine's speed cancels.
  std::unique_ptr<test::TwoHosts> two;
  Hosts hosts;
  if (c.two_hosts) {
    if (auto why = test::TwoHosts::unavailable())
      throw Error("bench_fault_tolerance --two-hosts: " + *why);
    two = std::make_unique<test::TwoHosts>();
    hosts.two = two.get();
    hosts.service_ip = two->ip(0);
  }
  const Phase before = run_phase(c, 0, root / "baseline", rng, hosts);
  const Phase faults = run_phase(c, c.kill_every, root / "faults", rng, hosts);
  const Phase after = run_phase(c, 0, root / "baseline2", rng, hosts);
  fs::remove_all(root);
  const double d = c.seconds;
  const auto steps_of = [](const Phase& p) { return static_cast<double>(p.commits.size()); };
  const auto samples_of = [&](const Phase& p) {
    double s = 0;
    for (const auto& [step, n] : p.participants) s += n * static_cast<double>(c.batch);
    return s;
  };
  const double base_steps = (steps_of(before) + steps_of(after)) / 2;
  const double base_samples = (samples_of(before) + samples_of(after)) / 2;
  const double step_time = d / std::max(1.0, base_steps);
  const double theoretical = 1.0 - static_cast<double>(faults.kills.size()) * step_time / d;
  std::vector<double> recovery, rejoin;
  for (int64_t k : faults.kills) {
    auto it = std::find_if(faults.commits.begin(), faults.commits.end(),
                           [&](const auto& sc) { return sc.second > k; });
    // The commits map is by step, and steps commit in time order.
    if (it != faults.commits.end()) recovery.push_back((it->second - k) * 1e-9);
  }
  for (const auto& [start, first] : faults.rejoins)
    if (first > 0) rejoin.push_back((first - start) * 1e-9);
  std::printf(
      "bench_fault_tolerance: %s, %d replicas on %s, batch %lld each, %.0f s per phase, a kill "
      "every %.1f s; CPU %s\n",
      c.model.c_str(), c.replicas, c.two_hosts ? "two hosts (namespaces, TCP)" : "one host",
      static_cast<long long>(c.batch), d, c.kill_every, cpu_features().model.c_str());
  std::printf(
      "  fault-free (mean of a run before and one after): %.0f committed steps (%.1f ms "
      "per step; %.0f and %.0f), %.0f samples\n",
      base_steps, step_time * 1e3, steps_of(before), steps_of(after), base_samples);
  std::printf("  with faults: %zu kills, %.0f committed steps, %.0f samples\n", faults.kills.size(),
              steps_of(faults), samples_of(faults));
  std::printf("  step efficiency %.3f (theoretical %.3f); sample efficiency %.3f\n",
              steps_of(faults) / std::max(1.0, base_steps), theoretical,
              samples_of(faults) / std::max(1.0, base_samples));
  std::printf("  recovery (kill -> next committed step): median %.3f s, worst %.3f s over %zu\n",
              median(recovery),
              recovery.empty() ? 0.0 : *std::max_element(recovery.begin(), recovery.end()),
              recovery.size());
  std::printf(
      "  rejoin (replacement start -> its first committed step): median %.3f s, worst "
      "%.3f s over %zu\n",
      median(rejoin), rejoin.empty() ? 0.0 : *std::max_element(rejoin.begin(), rejoin.end()),
      rejoin.size());
  std::printf("  hangs %d, failed replicas %d, leftover processes %d\n",
              before.hangs + faults.hangs + after.hangs,
              before.failed + faults.failed + after.failed,
              before.leftovers + faults.leftovers + after.leftovers);
  return 0;
}

}  // namespace
}  // namespace cohort

int main(int argc, char** argv) {
  try {
    return cohort::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fault_tolerance: %s\n", e.what());
    return 1;
  }
}
