// Store latency: one client's set/get/add round trips on each store, and a
// store barrier (add + wait) across N processes started with cohort::spawn.
// Usage: cohort_bench_store [--iters N] [--procs P]
// Prints one line per measurement: name, median and p90 in microseconds.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/launch/spawn.h"
#include "cohort/rendezvous/env_bootstrap.h"
#include "cohort/rendezvous/file_store.h"
#include "cohort/rendezvous/hash_store.h"
#include "cohort/rendezvous/tcp_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace cohort::rendezvous;

void report(const std::string& name, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  std::printf("%-28s median %8.2f us   p90 %8.2f us   (n=%zu)\n", name.c_str(), us[us.size() / 2],
              us[us.size() * 9 / 10], us.size());
}

std::vector<double> time_op(int iters, const std::function<void(int)>& op) {
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    op(i);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return us;
}

void bench_store(const std::string& name, Store& s, int iters) {
  Bytes value(64, 7);
  report(name + " set", time_op(iters, [&](int i) { s.set("k" + std::to_string(i % 16), value); }));
  report(name + " get", time_op(iters, [&](int i) { s.get("k" + std::to_string(i % 16)); }));
  report(name + " add", time_op(iters, [&](int) { s.add("counter", 1); }));
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 2000, procs = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--iters") iters = std::atoi(argv[i + 1]);
    if (a == "--procs") procs = std::atoi(argv[i + 1]);
  }
  {
    HashStore h;
    bench_store("HashStore", h, iters);
  }
  {
    auto path = std::filesystem::temp_directory_path() /
                ("cohort_bench_store_" + std::to_string(::getpid()));
    std::filesystem::remove(path);
    FileStore f(path.string());
    bench_store("FileStore", f, iters / 4);
    std::filesystem::remove(path);
  }
  {
    TcpStoreOptions o;
    o.is_server = true;
    o.token = "bench";
    TcpStore t(o);
    bench_store("TcpStore", t, iters);
  }
  // Barrier latency across processes: every rank adds, the last sets, all wait.
  int rounds = std::max(10, iters / 20);
  cohort::spawn(
      [rounds, procs](int rank) {
        auto r = bootstrap("env://");
        std::vector<double> us;
        for (int i = 0; i < rounds; ++i) {
          std::string key = "b" + std::to_string(i);
          auto t0 = Clock::now();
          if (r.store->add(key + "/n", 1) == r.world_size) r.store->set(key + "/go", "1");
          r.store->wait({key + "/go"});
          us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        if (rank == 0) report("TcpStore barrier x" + std::to_string(procs), us);
      },
      procs);
  return 0;
}
