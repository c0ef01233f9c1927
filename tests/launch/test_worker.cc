// A worker program for the launcher's end-to-end tests. The first argument
// picks what it does:
//   env                 print the launcher's variables, rendezvous through the
//                       store (env://), print a line on stderr
//   fail RANK CODE      RANK exits with CODE after the rendezvous; the others
//                       sleep (the launcher must stop them)
//   crash RANK          RANK kills itself with SIGSEGV; the others sleep
//   stubborn RANK       RANK exits 1; the others ignore SIGTERM and sleep
//   wait-term DIR       write DIR/pid<rank> and DIR/ready<rank>, wait for
//                       SIGTERM or SIGINT, write DIR/term<rank>
//   resume DIR          a "training" that checkpoints to DIR; rank 1 dies on
//                       the first attempt; later attempts resume and finish
//   spawn               cohort::spawn with a rank that throws; prints the error
//   late-fail           no rendezvous: rank 0 ends well at once; rank 1 exits 3
//                       after 2 s on attempt 0 (COHORT_RESTART_COUNT), and
//                       ends well on later attempts. Each prints its attempt.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cohort/launch/spawn.h"
#include "cohort/rendezvous/env_bootstrap.h"

namespace {

std::string env_or(const char* name, const char* fallback = "<unset>") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

int env_int(const char* name) { return std::atoi(env_or(name, "-1").c_str()); }

// All ranks meet at the store before going on, so a failure happens after
// every worker started.
void barrier(cohort::rendezvous::Store& store, int world, const std::string& name) {
  if (store.add(name + "/count", 1) == world) store.set(name + "/done", std::string("1"));
  store.wait({name + "/done"});
}

void sleep_long() {
  for (int i = 0; i < 300; ++i) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int run_env() {
  auto r = cohort::rendezvous::bootstrap("env://");
  cpu_set_t set;
  sched_getaffinity(0, sizeof(set), &set);
  std::printf(
      "RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s MASTER_ADDR=%s "
      "MASTER_PORT=%s TOKEN_LEN=%zu COHORT_NUM_THREADS=%s OMP_NUM_THREADS=%s "
      "OPENBLAS_NUM_THREADS=%s CPUS=%d RESTART=%s\n",
      env_or("RANK").c_str(), env_or("LOCAL_RANK").c_str(), env_or("WORLD_SIZE").c_str(),
      env_or("LOCAL_WORLD_SIZE").c_str(), env_or("GROUP_RANK").c_str(),
      env_or("MASTER_ADDR").c_str(), env_or("MASTER_PORT").c_str(),
      env_or("COHORT_TOKEN", "").size(), env_or("COHORT_NUM_THREADS").c_str(),
      env_or("OMP_NUM_THREADS").c_str(), env_or("OPENBLAS_NUM_THREADS").c_str(), CPU_COUNT(&set),
      env_or("COHORT_RESTART_COUNT").c_str());
  r.store->set("hello" + std::to_string(r.rank), std::to_string(r.rank * 10));
  barrier(*r.store, r.world_size, "env");
  int peer = (r.rank + 1) % r.world_size;
  std::printf("peer %d says %s\n", peer,
              r.store->get_string("hello" + std::to_string(peer)).c_str());
  std::fprintf(stderr, "stderr line from %d\n", r.rank);
  return 0;
}

int run_fail(int bad_rank, int code, bool crash, bool stubborn) {
  // Before the barrier, so the signal cannot come before it is ignored.
  if (stubborn && env_int("RANK") != bad_rank) ::signal(SIGTERM, SIG_IGN);
  auto r = cohort::rendezvous::bootstrap("env://");
  barrier(*r.store, r.world_size, "start");
  std::printf("started\n");
  std::fflush(stdout);
  if (r.rank == bad_rank) {
    if (crash) ::raise(SIGSEGV);
    std::exit(code);
  }
  sleep_long();
  return 0;
}

// The ranks in `bad` (comma-separated) exit with `code` one after the other
// (each after the previous one is gone); the others wait until all of them
// left, then end well: a job that tolerates lost workers must let them finish.
int run_lose(const std::string& bad, int code) {
  auto r = cohort::rendezvous::bootstrap("env://");
  std::vector<int> ranks;
  for (size_t at = 0; at < bad.size();) {
    size_t comma = bad.find(',', at);
    ranks.push_back(std::stoi(bad.substr(at, comma - at)));
    at = comma == std::string::npos ? bad.size() : comma + 1;
  }
  barrier(*r.store, r.world_size, "start");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (r.rank != ranks[i]) continue;
    if (i > 0) r.store->wait({"gone" + std::to_string(i - 1)}, std::chrono::seconds(30));
    // Give the launcher time to see the previous loss before this one.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    r.store->set("gone" + std::to_string(i), std::string("1"));
    std::exit(code);
  }
  r.store->wait({"gone" + std::to_string(ranks.size() - 1)}, std::chrono::seconds(30));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::printf("finished without the lost ranks\n");
  return 0;
}

// Rank 1 is SIGKILLed by rank 0, which then exits with an error at once, as a
// rank does when it sees its peer's connection drop: the launcher may reap rank
// 0 first, yet the killed rank is the cause it must name.
int run_kill_cascade() {
  auto r = cohort::rendezvous::bootstrap("env://");
  if (r.rank == 1) r.store->set("pid1", std::to_string(::getpid()));
  barrier(*r.store, r.world_size, "start");
  if (r.rank == 0) {
    pid_t victim = std::stoi(r.store->get_string("pid1"));
    ::kill(victim, SIGKILL);
    std::fprintf(stderr, "rank 1 lost\n");
    return 1;
  }
  sleep_long();
  return 0;
}

std::sig_atomic_t volatile g_term = 0;
void on_term(int) { g_term = 1; }

int run_wait_term(const std::string& dir) {
  int rank = env_int("RANK");
  struct sigaction sa {};
  sa.sa_handler = on_term;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  std::ofstream(dir + "/pid" + std::to_string(rank)) << ::getpid();
  std::ofstream(dir + "/ready" + std::to_string(rank)) << "1";
  for (int i = 0; i < 3000 && !g_term; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!g_term) return 2;
  std::ofstream(dir + "/term" + std::to_string(rank)) << "1";
  return 0;
}

int run_resume(const std::string& dir) {
  auto r = cohort::rendezvous::bootstrap("env://");
  int attempt = env_int("COHORT_RESTART_COUNT");
  std::string ckpt = dir + "/ckpt";
  int step = 0;
  if (std::ifstream in(ckpt); in) in >> step;
  std::printf("attempt %d resumes at step %d\n", attempt, step);
  barrier(*r.store, r.world_size, "start");
  for (; step < 10; ++step) {
    if (step == 5 && r.rank == 0) {
      std::ofstream(ckpt + ".tmp") << step;
      std::rename((ckpt + ".tmp").c_str(), ckpt.c_str());
    }
    barrier(*r.store, r.world_size, "step" + std::to_string(step));
    if (step == 7 && attempt == 0 && r.rank == 1) {
      std::printf("dying at step 7\n");
      std::fflush(stdout);
      std::_Exit(3);
    }
  }
  std::printf("finished at step %d\n", step);
  return 0;
}

int run_spawn() {
  try {
    cohort::spawn(
        [](int rank) {
          auto r = cohort::rendezvous::bootstrap("env://");
          barrier(*r.store, r.world_size, "spawn");
          if (rank == 2) throw std::runtime_error("rank two gives up");
          sleep_long();
        },
        3);
  } catch (const cohort::SpawnError& e) {
    std::printf("caught: %s (rank %d)\n", e.what(), e.rank());
    return 3;
  }
  return 0;
}

// A failure on one node after the other node's workers all ended well.
int run_late_fail() {
  const int rank = env_int("RANK"), attempt = env_int("COHORT_RESTART_COUNT");
  std::printf("attempt %d rank %d\n", attempt, rank);
  std::fflush(stdout);
  if (rank == 1 && attempt == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::printf("failing late\n");
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "env") return run_env();
    if (mode == "fail" && argc > 3) {
      return run_fail(std::atoi(argv[2]), std::atoi(argv[3]), false, false);
    }
    if (mode == "crash" && argc > 2) return run_fail(std::atoi(argv[2]), 0, true, false);
    if (mode == "stubborn" && argc > 2) return run_fail(std::atoi(argv[2]), 1, false, true);
    if (mode == "wait-term" && argc > 2) return run_wait_term(argv[2]);
    if (mode == "resume" && argc > 2) return run_resume(argv[2]);
    if (mode == "spawn") return run_spawn();
    if (mode == "lose" && argc > 3) return run_lose(argv[2], std::atoi(argv[3]));
    if (mode == "kill-cascade") return run_kill_cascade();
    if (mode == "late-fail") return run_late_fail();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_worker %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "test_worker: unknown mode '%s'\n", mode.c_str());
  return 64;
}
