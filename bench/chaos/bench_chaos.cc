// bench_chaos: how cohort ends when things break. Runs short training jobs
// (`cohort run ... cohort train`, synthetic data) on one host and on two hosts
// (network namespaces, tests/multihost/two_hosts.h; root only), injects one
// fault at a random moment -- SIGKILL to a random worker or to a random
// node's launcher (`cohort run` itself), or on two hosts a cut link -- and
// measures:
//   hangs          processes still running 90 s after the fault (then killed);
//   fault -> exit  time from the fault until every process of the job ended
//                  (median and worst);
//   failed, named  jobs that must fail (no restarts left, or a launcher
//                  killed): every launcher still alive exited non-zero, and
//                  its "job failed:" line names the victim (the killed rank,
//                  or "node N's launcher (pid P"); a cut link must name a
//                  lost launcher or the lost store;
//   leftovers      processes of the job alive after its launchers ended (found
//                  by the job's unique COHORT_TOKEN in /proc/*/environ) and
//                  /dev/shm/cohort-<pid>-* segments whose creator was one of
//                  the job's processes (other programs' segments on the same
//                  machine are not counted);
//   restarts       jobs run with --max-restarts 1 and checkpoints that were hit
//                  after their first checkpoint: resumed correctly when both
//                  nodes exited 0, the job said it resumed from a checkpoint,
//                  and its final model.safetensors holds bit for bit the
//                  tensors of an uninterrupted run's (run once per host kind
//                  at the start; the runs are deterministic).
//
//   bench_chaos [--jobs 100] [--seed 1] [--one-host-only | --two-hosts-only]
//               [--launchers-only] [--nproc-per-node 1]
// --nproc-per-node: workers per node on two hosts (one host always runs two).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/checkpoint/safetensors.h"
#include "tests/multihost/two_hosts.h"
#include "tests/train/process_util.h"

using namespace std::chrono_literals;
using cohort::test::Background;
using cohort::test::TwoHosts;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kCohort = COHORT_BIN;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Pids whose environment holds COHORT_TOKEN=token.
std::vector<pid_t> job_processes(const std::string& token) {
  std::vector<pid_t> out;
  const std::string want = "COHORT_TOKEN=" + token;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid == ::getpid()) continue;
    const std::string env = read("/proc/" + std::string(e->d_name) + "/environ");
    for (size_t pos = 0; pos < env.size();) {
      size_t nul = env.find('\0', pos);
      if (nul == std::string::npos) nul = env.size();
      if (env.compare(pos, nul - pos, want) == 0) {
        // Zombies have ended; their parent reaps them.
        const std::string stat = read("/proc/" + std::string(e->d_name) + "/stat");
        const size_t paren = stat.rfind(')');
        if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z')
          out.push_back(static_cast<pid_t>(pid));
        break;
      }
      pos = nul + 1;
    }
  }
  ::closedir(d);
  return out;
}

// /dev/shm/cohort-<creator pid>-<random> (cohort/transport/shm_segment.cc)
// created by one of `pids`.
int segments_of(const std::set<pid_t>& pids) {
  int n = 0;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return n;
  while (dirent* e = ::readdir(d)) {
    long pid = 0;
    char rest[64];
    if (std::sscanf(e->d_name, "cohort-%ld-%60s", &pid, rest) == 2 &&
        pids.count(static_cast<pid_t>(pid)))
      ++n;
  }
  ::closedir(d);
  return n;
}

// Bit for bit the same tensors; the reason when not.
std::string compare_models(const std::string& a, const std::string& b) {
  try {
    auto ta = cohort::checkpoint::load_safetensors(a).tensors;
    auto tb = cohort::checkpoint::load_safetensors(b).tensors;
    if (ta.keys() != tb.keys()) return "different tensor names in " + a + " and " + b;
    for (const auto& [name, t] : ta) {
      if (!cohort::equal(t, tb.at(name))) return name + " differs between " + a + " and " + b;
    }
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Workers per node of the two-host jobs (--nproc-per-node).
int g_nproc_two_hosts = 1;

int world_size(bool two_hosts) { return two_hosts ? 2 * g_nproc_two_hosts : 2; }

// 2 epochs x 8192 examples / (64 x the job's ranks).
int restartable_steps(bool two_hosts) { return 2 * 8192 / (64 * world_size(two_hosts)); }

struct JobResult {
  bool two_hosts = false;
  std::string fault;  // "kill rank R", "kill launcher N" or "cut link"
  bool launcher_victim = false;
  bool restartable = false;
  bool must_fail = false;  // judged by failed_ok / named
  bool failed_ok = false;  // every surviving launcher exited non-zero
  bool named = false;      // ... naming the fault
  std::string why_not;     // the first surviving launcher's output that fails either
  bool hung = false;
  double fault_to_exit_s = 0;
  int leftover_processes = 0;
  int leftover_segments = 0;
  bool resumed_correctly = false;
  bool fault_landed = true;  // false: the job ended before the fault
};

struct Job {
  int index = 0;
  bool two_hosts = false;
  bool cut_link = false;
  bool restartable = false;
  double delay_s = 0;  // after training started
  bool kill_launcher = false;
  int victim_rank = 0;  // a worker's rank, or a launcher's node
};

std::vector<std::string> train_args(const Job& j, const std::string& dir) {
  std::vector<std::string> a = {"--",        kCohort,     "train", "--dataset",
                                "synthetic", "--threads", "1",     "--synthetic-test-size",
                                "128"};
  // Restartable: 2 epochs of 8192 examples (restartable_steps), checkpoints every 16 steps.
  const std::vector<std::string> more =
      j.restartable ? std::vector<std::string>{"--synthetic-train-size",
                                               "8192",
                                               "--epochs",
                                               "2",
                                               "--checkpoint-dir",
                                               dir,
                                               "--checkpoint-every",
                                               "16",
                                               "--resume",
                                               "auto"}
                    : std::vector<std::string>{"--synthetic-train-size", "60000", "--epochs", "50"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::string final_model(const std::string& dir, bool two_hosts) {
  char step[32];
  std::snprintf(step, sizeof(step), "/step-%08d", restartable_steps(two_hosts));
  return dir + step + "/model.safetensors";
}

// The final model of an uninterrupted restartable job (per host kind): what a
// restarted one must end with.
struct References {
  std::string one_host, two_hosts;
};

// The job's launchers: one `cohort run` with two workers, or one with one
// worker in each host's namespace.
std::vector<std::unique_ptr<Background>> start_job(const Job& j, const TwoHosts* hosts,
                                                   const std::string& dir,
                                                   const std::string& token) {
  std::vector<std::string> restart;
  if (j.restartable) restart = {"--max-restarts", "1"};
  std::vector<std::unique_ptr<Background>> launchers;
  const std::vector<std::string> env = {"COHORT_TOKEN=" + token};
  if (!j.two_hosts) {
    std::vector<std::string> argv = {kCohort, "run", "--nproc-per-node", "2"};
    argv.insert(argv.end(), restart.begin(), restart.end());
    auto t = train_args(j, dir);
    argv.insert(argv.end(), t.begin(), t.end());
    launchers.push_back(std::make_unique<Background>(argv, env));
  } else {
    for (int node = 0; node < 2; ++node) {
      std::vector<std::string> argv = hosts->cohort_run(node, kCohort, 29531, g_nproc_two_hosts);
      argv.insert(argv.end(), restart.begin(), restart.end());
      auto t = train_args(j, dir);
      argv.insert(argv.end(), t.begin(), t.end());
      launchers.push_back(std::make_unique<Background>(hosts->in(node, argv), env));
    }
  }
  return launchers;
}

// Runs a restartable job without a fault; the path of its final model.
std::string reference_run(bool two_hosts, const TwoHosts* hosts) {
  Job j;
  j.index = two_hosts ? -2 : -1;
  j.two_hosts = two_hosts;
  j.restartable = true;
  const std::string dir = cohort::test::make_temp_dir(two_hosts ? "chaos-ref2" : "chaos-ref1");
  auto launchers = start_job(
      j, hosts, dir, "chaos-" + std::to_string(::getpid()) + (two_hosts ? "-ref2" : "-ref1"));
  for (auto& l : launchers) {
    const int rc = l->wait(180s);
    if (rc != 0) {
      throw std::runtime_error(std::string("the uninterrupted ") +
                               (two_hosts ? "two-host" : "one-host") + " reference run " +
                               (rc == -1 ? "hung" : "exited " + std::to_string(rc)) + ":\n" +
                               l->output());
    }
  }
  return final_model(dir, two_hosts);
}

JobResult run_job(const Job& j, const TwoHosts* hosts, const References& refs) {
  JobResult r;
  r.two_hosts = j.two_hosts;
  r.restartable = j.restartable;
  const std::string token = "chaos-" + std::to_string(::getpid()) + "-" + std::to_string(j.index);
  const std::string dir = cohort::test::make_temp_dir("chaos" + std::to_string(j.index));
  std::set<pid_t> seen;  // every process of the job, for its shm segments
  auto launchers = start_job(j, hosts, dir, token);
  // Also notes the job's processes, whose shm segments count as its own.
  auto all_ended = [&] {
    const std::vector<pid_t> alive = job_processes(token);
    seen.insert(alive.begin(), alive.end());
    for (auto& l : launchers)
      if (l->wait(0ms) == -1) return false;
    return alive.empty();
  };
  // Wait for training (or, for restartable jobs, the first checkpoint).
  const std::string ready = j.restartable ? "checkpoint: " : "epoch 1/50 step";
  const auto start_deadline = Clock::now() + 60s;
  while (Clock::now() < start_deadline && launchers[0]->output().find(ready) == std::string::npos) {
    all_ended();
    std::this_thread::sleep_for(20ms);
  }
  const auto fault_due = Clock::now() + std::chrono::duration<double>(j.delay_s);
  while (Clock::now() < fault_due) {
    all_ended();
    std::this_thread::sleep_for(20ms);
  }
  if (all_ended()) r.fault_landed = false;
  const auto fault_at = Clock::now();
  pid_t victim = -1;
  if (j.cut_link) {
    r.fault = "cut link";
    hosts->set_link(1, false);
  } else if (j.kill_launcher) {
    r.fault = "kill launcher " + std::to_string(j.victim_rank);
    r.launcher_victim = true;
    victim = launchers[static_cast<size_t>(j.victim_rank)]->pid();
    ::kill(victim, SIGKILL);
  } else {
    r.fault = "kill rank " + std::to_string(j.victim_rank);
    const size_t node = j.two_hosts ? static_cast<size_t>(j.victim_rank / g_nproc_two_hosts) : 0;
    const pid_t w = cohort::test::find_worker(launchers[node]->pid(), j.victim_rank);
    if (w > 0) {
      victim = w;
      ::kill(w, SIGKILL);
    } else {
      r.fault_landed = false;
    }
  }
  while (!all_ended() && Clock::now() - fault_at < 90s) std::this_thread::sleep_for(10ms);
  r.fault_to_exit_s = std::chrono::duration<double>(Clock::now() - fault_at).count();
  if (!all_ended()) {
    r.hung = true;
    for (pid_t p : job_processes(token)) ::kill(p, SIGKILL);
  }
  for (auto& l : launchers) l->wait(10s);
  std::this_thread::sleep_for(200ms);
  r.leftover_processes = static_cast<int>(job_processes(token).size());
  for (pid_t p : job_processes(token)) ::kill(p, SIGKILL);
  r.leftover_segments = segments_of(seen);
  // The job fails (every node non-zero, the cause named) unless a worker was
  // killed with a restart left, which it survives.
  r.must_fail = !j.restartable || j.kill_launcher;
  if (r.must_fail && !r.hung) {
    std::string cause;
    if (j.kill_launcher) {
      cause = "job failed: node " + std::to_string(j.victim_rank) + "'s launcher (pid " +
              std::to_string(victim);
    } else if (!j.cut_link) {
      cause = "job failed: rank " + std::to_string(j.victim_rank) + " (local rank";
    }
    r.failed_ok = r.named = true;
    for (size_t node = 0; node < launchers.size(); ++node) {
      if (j.kill_launcher && static_cast<int>(node) == j.victim_rank) continue;
      const std::string out = launchers[node]->output();
      const bool failed = launchers[node]->wait(0ms) != 0;
      bool named = j.cut_link ? out.find("job failed: lost ") != std::string::npos ||
                                    out.find("job failed: node ") != std::string::npos
                              : out.find(cause) != std::string::npos;
      if ((!failed || !named) && r.why_not.empty()) {
        r.why_not = "node " + std::to_string(node) + (failed ? "" : " exited 0") +
                    (named ? "" : " did not name the fault") + "; its output ends:\n" +
                    out.substr(out.size() > 1200 ? out.size() - 1200 : 0);
      }
      r.failed_ok = r.failed_ok && failed;
      r.named = r.named && named;
    }
  }
  if (j.restartable && !j.kill_launcher) {
    const std::string out = launchers[0]->output();
    bool all_ok = true;
    for (auto& l : launchers) all_ok = all_ok && l->wait(0ms) == 0;
    std::string why;
    if (!all_ok) {
      why = "a node exited non-zero";
    } else if (out.find("resumed from") == std::string::npos) {
      why = "it did not say it resumed from a checkpoint";
    } else {
      why = compare_models(final_model(dir, j.two_hosts),
                           j.two_hosts ? refs.two_hosts : refs.one_host);
    }
    r.resumed_correctly = why.empty();
    if (!r.resumed_correctly && r.fault_landed) {
      std::printf("job %d did not resume correctly (%s); node 0's output ends:\n%s\n", j.index,
                  why.c_str(), out.substr(out.size() > 1500 ? out.size() - 1500 : 0).c_str());
    }
  }
  if (j.cut_link) hosts->set_link(1, true);
  return r;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 100;
  unsigned seed = 1;
  bool one_host_only = false, two_hosts_only = false, launchers_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--jobs" && i + 1 < argc) {
      jobs = std::atoi(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = static_cast<unsigned>(std::atoi(argv[++i]));
    } else if (a == "--one-host-only") {
      one_host_only = true;
    } else if (a == "--two-hosts-only") {
      two_hosts_only = true;
    } else if (a == "--launchers-only") {
      launchers_only = true;
    } else if (a == "--nproc-per-node" && i + 1 < argc) {
      g_nproc_two_hosts = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: bench_chaos [--jobs N] [--seed S] [--one-host-only | --two-hosts-only] "
                   "[--launchers-only] [--nproc-per-node N]\n");
      return 2;
    }
  }
  std::unique_ptr<TwoHosts> hosts;
  if (!one_host_only) {
    if (auto why = TwoHosts::unavailable()) {
      std::printf("two-host jobs skipped: %s\n", why->c_str());
    } else {
      hosts = std::make_unique<TwoHosts>();
    }
  }
  std::mt19937 rng(seed);
  std::printf("bench_chaos: %s, %u cores; %d jobs, seed %u; two hosts: %d worker(s) per node\n",
              cohort::cpu_features().model.c_str(), std::thread::hardware_concurrency(), jobs, seed,
              g_nproc_two_hosts);
  std::fflush(stdout);
  References refs;
  try {
    // Only a restarted job is compared with them, and --launchers-only restarts none.
    if (!launchers_only && (!two_hosts_only || !hosts))
      refs.one_host = reference_run(false, hosts.get());
    if (!launchers_only && hosts) refs.two_hosts = reference_run(true, hosts.get());
  } catch (const std::exception& e) {
    std::printf("bench_chaos: %s\n", e.what());
    return 1;
  }
  std::vector<JobResult> results;
  for (int i = 0; i < jobs; ++i) {
    Job j;
    j.index = i;
    j.two_hosts = hosts != nullptr && (two_hosts_only || i % 2 == 1);
    j.restartable = rng() % 5 == 0;
    j.cut_link = j.two_hosts && !j.restartable && rng() % 5 == 0;
    j.delay_s = std::uniform_real_distribution<double>(0.0, j.restartable ? 0.5 : 1.5)(rng);
    j.victim_rank = static_cast<int>(rng() % 2);
    // Half the kills go to a launcher: node 0's or node 1's (one host: its only one).
    j.kill_launcher = !j.cut_link && (launchers_only || rng() % 2 == 0);
    if (j.kill_launcher && !j.two_hosts) j.victim_rank = 0;
    // A worker of either node (the draw above picked the node).
    if (!j.kill_launcher && j.two_hosts && g_nproc_two_hosts > 1)
      j.victim_rank =
          j.victim_rank * g_nproc_two_hosts + static_cast<int>(rng() % g_nproc_two_hosts);
    JobResult r = run_job(j, hosts.get(), refs);
    const bool resumes = r.restartable && !r.launcher_victim;
    std::printf("job %3d  %-9s %-16s %-10s %s  %.2f s  leftovers %d/%d%s%s\n", i,
                r.two_hosts ? "two-host" : "one-host", r.fault.c_str(),
                r.restartable ? "restart" : "",
                r.hung ? "HUNG" : (r.fault_landed ? "ended" : "ended before the fault"),
                r.fault_to_exit_s, r.leftover_processes, r.leftover_segments,
                resumes ? (r.resumed_correctly ? "  resumed ok" : "  RESUME FAILED") : "",
                r.must_fail && r.fault_landed && !r.hung
                    ? (r.failed_ok && r.named ? "  failed, named" : "  NOT FAILED OR NOT NAMED")
                    : "");
    if (r.must_fail && r.fault_landed && !r.hung && !(r.failed_ok && r.named))
      std::printf("%s\n", r.why_not.c_str());
    std::fflush(stdout);
    results.push_back(r);
  }
  std::printf("\n%-26s %5s %5s %8s %8s %9s %8s %13s %10s\n", "jobs", "count", "hangs", "median s",
              "worst s", "left proc", "left shm", "failed, named", "resumed ok");
  auto row = [&](const char* name, auto pick) {
    std::vector<double> t;
    int n = 0, hangs = 0, procs = 0, segs = 0, restarts = 0, resumed = 0, failing = 0, named = 0;
    for (const JobResult& r : results) {
      if (!pick(r)) continue;
      // A job that hung counts even when its fault never landed.
      hangs += r.hung;
      if (!r.fault_landed) continue;
      ++n;
      procs += r.leftover_processes;
      segs += r.leftover_segments;
      // Jobs that fail end at once; a restarted one runs on to its end.
      if (r.must_fail) t.push_back(r.fault_to_exit_s);
      if (r.must_fail && !r.hung) {
        ++failing;
        named += r.failed_ok && r.named;
      }
      if (r.restartable && !r.launcher_victim) {
        ++restarts;
        resumed += r.resumed_correctly;
      }
    }
    if (n == 0) return;
    std::printf("%-26s %5d %5d %8.2f %8.2f %9d %8d %10d/%-2d %7d/%-2d\n", name, n, hangs,
                percentile(t, 0.5), t.empty() ? 0.0 : *std::max_element(t.begin(), t.end()), procs,
                segs, named, failing, resumed, restarts);
  };
  auto worker = [](const JobResult& r) { return r.fault.rfind("kill rank", 0) == 0; };
  row("one host, kill worker", [&](const JobResult& r) { return !r.two_hosts && worker(r); });
  row("one host, kill launcher",
      [](const JobResult& r) { return !r.two_hosts && r.launcher_victim; });
  row("two hosts, kill worker", [&](const JobResult& r) { return r.two_hosts && worker(r); });
  row("two hosts, kill launcher 0",
      [](const JobResult& r) { return r.fault == "kill launcher 0" && r.two_hosts; });
  row("two hosts, kill launcher 1",
      [](const JobResult& r) { return r.fault == "kill launcher 1"; });
  row("two hosts, cut link", [](const JobResult& r) { return r.fault == "cut link"; });
  row("all", [](const JobResult&) { return true; });
  const auto missed = std::count_if(results.begin(), results.end(),
                                    [](const JobResult& r) { return !r.fault_landed; });
  std::printf(
      "(fault -> exit: jobs that must fail (no restart left, or a launcher killed); a restarted "
      "job runs on to its end. %ld job(s) ended before their fault and are left out)\n",
      static_cast<long>(missed));
  return 0;
}
