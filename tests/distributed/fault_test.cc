// Failures between real processes, seen through ProcessGroup and Work: a rank
// killed with SIGKILL in the middle of a stream of collectives makes every
// other rank's pending and later ops fail fast with an error naming the dead
// rank and the op; ranks calling different collectives, or the same one with
// different sizes or dtypes, get an error showing both sides and no corrupted
// data; an op that times out names the op, group, sequence number and the
// rank that did not arrive. Every case ends in an exception, never a hang
// (run_processes kills and reports a hung rank).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <random>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/distributed/process_group.h"
#include "tests/distributed/process_runner.h"

namespace cohort::distributed {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::shared_ptr<ProcessGroup> join(const std::string& path, int rank, int n, Duration timeout) {
  return init_process_group("native", "file://" + path, n, rank, timeout);
}

// All ranks stream async all_reduces; `victim` SIGKILLs itself from a second
// thread after a short random delay, so it dies inside a collective.
void kill_mid_stream(int n, int victim, size_t count, bool tcp) {
  std::string path = testing::temp_path("cohort-dist-kill");
  auto status = testing::run_processes(n, 60s, [&](int rank) {
    if (tcp) ::setenv("COHORT_TRANSPORT", "tcp", 1);
    // A timeout far beyond the test's limit: only failure detection can end the waits.
    auto pg = join(path, rank, n, 300s);
    std::vector<std::vector<float>> bufs(4, std::vector<float>(count, 1.0f));
    std::thread killer;
    if (rank == victim) {
      killer = std::thread([] {
        std::mt19937 rng(static_cast<unsigned>(::getpid()));
        std::this_thread::sleep_for(std::chrono::milliseconds(30 + rng() % 40));
        ::raise(SIGKILL);
      });
    }
    for (int it = 0; it < 10000000; ++it) {
      std::vector<Work> works;
      for (auto& b : bufs)
        works.push_back(pg->all_reduce(b.data(), count, DataType::kFloat32, {}, async_op));
      try {
        for (auto& w : works) w.wait();
      } catch (const PeerLost& e) {
        std::string m = e.what();
        if (!contains(m, "rank " + std::to_string(victim)) || !contains(m, "all_reduce")) {
          throw Error("PeerLost does not name the dead rank and the op: " + m);
        }
        // Every op issued with it has ended (failed, unless it completed
        // before the death), and the next op fails too.
        for (auto& w : works) {
          try {
            w.wait(30s);  // bounded: a pending op must end
          } catch (const TimeoutError&) {
            throw Error("an op issued before the death is still pending");
          } catch (const Error&) {
            if (!w.exception()) throw Error("a failed op has no exception");
          }
        }
        bool barrier_failed = false;
        try {
          pg->barrier();
        } catch (const Error&) {
          barrier_failed = true;
        }
        if (!barrier_failed) throw Error("barrier after PeerLost succeeded");
        // Exits at once: a fellow survivor still waiting must not blame this
        // rank for the victim's death.
        return;
      }
    }
    throw Error("stream ended without an error");
  });
  ::unlink(path.c_str());
  for (int r = 0; r < n; ++r) {
    int st = status[static_cast<size_t>(r)];
    if (r == victim) {
      EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "victim status " << st;
    } else {
      EXPECT_TRUE(testing::exited_ok(st)) << "rank " << r << " status " << st;
    }
  }
}

TEST(DistributedFault, KilledRankFailsTheOthersNamingItSharedMemory) {
  kill_mid_stream(3, 1, 1000, false);
}

TEST(DistributedFault, KilledRankFailsTheOthersNamingItLargeMessages) {
  kill_mid_stream(3, 2, 1 << 18, false);
}

TEST(DistributedFault, KilledRankFailsTheOthersNamingItTcp) { kill_mid_stream(3, 0, 5000, true); }

// Ranks 0 and 1 issue `a` and `b`; both must fail with InvalidArgument (or,
// on the rank that learns second, the peer's abort naming the mismatch), and
// the buffer must be untouched.
void mismatch(const std::function<Work(ProcessGroup&, std::vector<float>&)>& a,
              const std::function<Work(ProcessGroup&, std::vector<float>&)>& b,
              const std::vector<std::string>& must_name) {
  std::string path = testing::temp_path("cohort-dist-mismatch");
  auto status = testing::run_processes(2, 60s, [&](int rank) {
    auto pg = join(path, rank, 2, 30s);
    pg->barrier();
    std::vector<float> buf(64, static_cast<float>(rank + 1));
    Work w = rank == 0 ? a(*pg, buf) : b(*pg, buf);
    try {
      w.wait();
    } catch (const InvalidArgument& e) {
      for (const auto& part : must_name) {
        if (!contains(e.what(), part))
          throw Error("mismatch message lacks '" + part + "': " + e.what());
      }
      if (buf != std::vector<float>(64, static_cast<float>(rank + 1)))
        throw Error("buffer was written");
      return;
    } catch (const Error& e) {
      if (!contains(e.what(), "rank " + std::to_string(1 - rank))) {
        throw Error(std::string("error does not name the peer: ") + e.what());
      }
      return;
    }
    throw Error("mismatch was not detected");
  });
  ::unlink(path.c_str());
  for (int s : status) EXPECT_TRUE(testing::exited_ok(s)) << s;
}

TEST(DistributedFault, DifferentCollectivesAreAMismatch) {
  mismatch(
      [](ProcessGroup& pg, std::vector<float>& b) {
        return pg.all_reduce(b.data(), 64, DataType::kFloat32, {}, async_op);
      },
      [](ProcessGroup& pg, std::vector<float>& b) {
        return pg.broadcast(b.data(), 64, DataType::kFloat32, {}, async_op);
      },
      {"all_reduce", "broadcast"});
}

TEST(DistributedFault, DifferentCountsAreAMismatch) {
  mismatch(
      [](ProcessGroup& pg, std::vector<float>& b) {
        return pg.all_reduce(b.data(), 64, DataType::kFloat32, {}, async_op);
      },
      [](ProcessGroup& pg, std::vector<float>& b) {
        return pg.all_reduce(b.data(), 63, DataType::kFloat32, {}, async_op);
      },
      {"64", "63"});
}

TEST(DistributedFault, DifferentDtypesAreAMismatch) {
  mismatch(
      [](ProcessGroup& pg, std::vector<float>& b) {
        return pg.all_reduce(b.data(), 64, DataType::kFloat32, {}, async_op);
      },
      [](ProcessGroup& pg, std::vector<float>& b) {
        return pg.all_reduce(b.data(), 64, DataType::kInt32, {}, async_op);
      },
      {"float32", "int32"});
}

TEST(DistributedFault, TimeoutNamesOpGroupSequenceAndTheMissingRank) {
  std::string path = testing::temp_path("cohort-dist-timeout");
  auto status = testing::run_processes(3, 60s, [&](int rank) {
    auto pg = join(path, rank, 3, 30s);
    pg->barrier();  // seq 0
    if (rank == 2) {
      // Arrives long after the others gave up. (Its barrier may still
      // complete: the others did enter it.) The next op needs them: it fails.
      std::this_thread::sleep_for(1500ms);
      try {
        pg->barrier();
      } catch (const Error&) {
      }
      float x = 1;
      try {
        pg->all_reduce(&x, 1, DataType::kFloat32);
      } catch (const Error&) {
        return;
      }
      throw Error("all_reduce succeeded although the other ranks gave up");
    }
    try {
      pg->barrier({.timeout = 300ms});
    } catch (const TimeoutError& e) {
      std::string m = e.what();
      for (const char* part : {"barrier", "group 'default'", "seq 1", "2"}) {
        if (!contains(m, part))
          throw Error("timeout message lacks '" + std::string(part) + "': " + m);
      }
      return;
    } catch (const Error& e) {
      // Rank 0 and 1: the one that times out second may see the other's abort first.
      if (contains(e.what(), "barrier")) return;
      throw;
    }
    throw Error("barrier did not time out");
  });
  ::unlink(path.c_str());
  for (int s : status) EXPECT_TRUE(testing::exited_ok(s)) << s;
}

}  // namespace
}  // namespace cohort::distributed
