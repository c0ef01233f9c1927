#include "cohort/launch/spawn.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "cohort/rendezvous/env_bootstrap.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;

TEST(Spawn, RanksRendezvousThroughHostedStore) {
  spawn(
      [](int rank) {
        auto r = rendezvous::bootstrap("env://");
        if (r.rank != rank || r.world_size != 3) throw std::runtime_error("wrong rank/world");
        r.store->set("rank" + std::to_string(rank), std::to_string(rank));
        if (r.store->add("arrived", 1) == 3) r.store->set("all", std::string("1"));
        r.store->wait({"all"});
        for (int q = 0; q < 3; ++q) {
          if (r.store->get_string("rank" + std::to_string(q)) != std::to_string(q)) {
            throw std::runtime_error("bad value");
          }
        }
      },
      3);
}

TEST(Spawn, ExceptionIsPropagatedNamingTheRank) {
  try {
    spawn(
        [](int rank) {
          if (rank == 1) throw std::runtime_error("boom in worker");
          // The others would wait forever; spawn must stop them.
          ::pause();
        },
        3);
    FAIL() << "spawn returned";
  } catch (const SpawnError& e) {
    EXPECT_EQ(e.rank(), 1);
    std::string what = e.what();
    EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find("boom in worker"), std::string::npos) << what;
  }
}

TEST(Spawn, CrashIsReportedWithSignal) {
  SpawnOptions o;
  o.grace = 1s;
  try {
    spawn(
        [](int rank) {
          if (rank == 0) ::raise(SIGKILL);
          ::pause();
        },
        2, o);
    FAIL() << "spawn returned";
  } catch (const SpawnError& e) {
    EXPECT_EQ(e.rank(), 0);
    EXPECT_EQ(e.status().signal, SIGKILL);
    EXPECT_NE(std::string(e.what()).find("SIGKILL"), std::string::npos) << e.what();
  }
}

TEST(Spawn, ExitCodeAndThreadBudget) {
  SpawnOptions o;
  o.pin = true;
  spawn(
      [](int rank) {
        const char* t = std::getenv("COHORT_NUM_THREADS");
        if (t == nullptr || std::atoi(t) < 1) std::_Exit(9);
      },
      2, o);
  try {
    spawn([](int rank) { std::exit(rank == 1 ? 4 : 0); }, 2);
    FAIL();
  } catch (const SpawnError& e) {
    EXPECT_EQ(e.status().code, 4);
    EXPECT_NE(std::string(e.what()).find("exited with code 4"), std::string::npos);
  }
}

}  // namespace
}  // namespace cohort
