// Failure handling: a rank killed with SIGKILL mid-collective (real
// processes), mismatched collectives, timeouts, a peer that left, abort().
// Every case must end in an exception on every surviving rank, never a hang.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <latch>
#include <random>
#include <thread>

#include "cohort/collectives/allreduce_direct.h"
#include "cohort/collectives/test_util.h"

namespace cohort::collectives {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Ranks loop on all_reduce; `victim` kills itself with SIGKILL from a second
// thread after a short random delay, so it dies inside a collective.
void kill_mid_collective(TransportKind transport, int n, int victim, size_t count,
                         const char* algo = nullptr) {
  std::string name = testing::unique_name("kill");
  auto status = testing::run_processes(n, 60s, [&](int rank, rendezvous::Store& store) {
    if (algo != nullptr) ::setenv("COHORT_ALLREDUCE_ALGO", algo, 1);
    CommunicatorOptions o;
    o.name = name;
    o.transport = transport;
    o.timeout = 120s;  // far beyond the test's limit: only liveness can end the wait
    auto comm = Communicator::create(store, rank, n, testing::with_env_knobs(o));
    std::vector<float> buf(count, 1.0f);
    std::thread killer;
    if (rank == victim) {
      killer = std::thread([] {
        std::mt19937 rng(static_cast<unsigned>(::getpid()));
        std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 30));
        ::raise(SIGKILL);
      });
    }
    try {
      for (int it = 0; it < 1000000; ++it) {
        comm->all_reduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
      }
    } catch (const PeerLost& e) {
      if (!contains(e.what(), "rank " + std::to_string(victim))) {
        throw Error(std::string("PeerLost does not name the victim: ") + e.what());
      }
      // Later ops fail at once with the same error.
      try {
        comm->barrier();
      } catch (const PeerLost&) {
        return;
      }
      throw Error("barrier after PeerLost did not throw");
    }
    throw Error("loop ended without an error");
  });
  for (int r = 0; r < n; ++r) {
    int st = status[static_cast<size_t>(r)];
    if (r == victim) {
      EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "victim status " << st;
    } else {
      EXPECT_TRUE(testing::exited_ok(st)) << "rank " << r << " status " << st;
    }
  }
}

TEST(Failure, KilledRankShmSmallMessages) { kill_mid_collective(TransportKind::kShm, 4, 1, 3); }
TEST(Failure, KilledRankShmLargeMessages) {
  kill_mid_collective(TransportKind::kShm, 3, 2, 1 << 20);
}
TEST(Failure, KilledRankShmSingleCopy) {
  // Falls back to the rings where process_vm_readv is not allowed.
  kill_mid_collective(TransportKind::kShm, 3, 1, 1 << 20, "pull");
}
TEST(Failure, KilledRankTcp) { kill_mid_collective(TransportKind::kTcp, 4, 0, 100000); }

TEST(Failure, KilledRankWhileOthersWaitInBarrier) {
  // Rank 2 dies before entering the barrier the others are blocked in.
  std::string name = testing::unique_name("kill-barrier");
  auto status = testing::run_processes(3, 60s, [&](int rank, rendezvous::Store& store) {
    CommunicatorOptions o;
    o.name = name;
    o.timeout = 120s;
    auto comm = Communicator::create(store, rank, 3, o);
    comm->barrier();
    if (rank == 2) {
      std::this_thread::sleep_for(100ms);
      ::raise(SIGKILL);
    }
    try {
      comm->barrier();
    } catch (const PeerLost& e) {
      if (contains(e.what(), "rank 2")) return;
      throw;
    }
    throw Error("barrier returned although rank 2 died");
  });
  EXPECT_TRUE(testing::exited_ok(status[0]));
  EXPECT_TRUE(testing::exited_ok(status[1]));
  EXPECT_TRUE(WIFSIGNALED(status[2]));
}

// Runs fn on n threads and collects each rank's exception message ("" when none).
std::vector<std::string> collect_errors(int n, TransportKind t,
                                        const std::function<void(Communicator&)>& fn,
                                        Duration timeout = 20s) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  testing::run_threads(n, testing::options(t, "fail", timeout), [&](Communicator& c) {
    try {
      fn(c);
    } catch (const Error& e) {
      errors[static_cast<size_t>(c.rank())] = e.what();
    }
  });
  return errors;
}

class FailureTest : public ::testing::TestWithParam<TransportKind> {};

TEST_P(FailureTest, CountMismatchIsReportedWithBothSides) {
  std::vector<std::string> errs = collect_errors(2, GetParam(), [](Communicator& c) {
    size_t count = c.rank() == 0 ? 10 : 12;
    std::vector<float> buf(count, 1.0f);
    try {
      c.all_reduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    } catch (const InvalidArgument&) {
      throw;
    } catch (const Error& e) {
      throw Error(std::string("wrong exception type: ") + e.what());
    }
  });
  bool both_sides = false;
  for (const auto& e : errs) {
    EXPECT_FALSE(e.empty());
    EXPECT_FALSE(contains(e, "wrong exception type")) << e;
    both_sides |= contains(e, "rank 0 called all_reduce #0 (count=10") &&
                  contains(e, "rank 1 called all_reduce #0 (count=12");
  }
  EXPECT_TRUE(both_sides) << errs[0] << "\n" << errs[1];
}

TEST_P(FailureTest, AllToAllVCountMismatchIsReportedWithBothSides) {
  // Rank 0 sends 3 elements to rank 1, which expects 2. Both ranks of the
  // pair see it in the other's header; rank 2, which agrees with both, hears
  // of it from them (in the op, or at the barrier if it got through).
  std::vector<int32_t> guarded(8, 77);
  std::vector<std::string> errs = collect_errors(3, GetParam(), [&](Communicator& c) {
    std::vector<size_t> sc(3, 1), rc(3, 1);
    if (c.rank() == 0) sc[1] = 3;
    if (c.rank() == 1) rc[0] = 2;
    std::vector<int32_t> send(8, c.rank()), own(8);
    int32_t* recv = c.rank() == 1 ? guarded.data() : own.data();
    try {
      c.all_to_all_v(send.data(), sc.data(), recv, rc.data(), DataType::kInt32);
      c.barrier();
    } catch (const InvalidArgument&) {
      throw;
    } catch (const Error& e) {
      throw Error(std::string("wrong exception type: ") + e.what());
    }
  });
  for (const std::string& e : errs) {
    EXPECT_TRUE(contains(e,
                         "rank 0 sends 3 elements to rank 1 (its send_counts[1]), but rank 1 "
                         "expects 2 from rank 0 (its recv_counts[0])"))
        << e;
  }
  // Rank 1 took nothing from rank 0 (the header comes first): the block of
  // rank 0 (its first two elements) is untouched.
  EXPECT_EQ(guarded[0], 77);
  EXPECT_EQ(guarded[1], 77);
}

TEST_P(FailureTest, DifferentCollectivesAreDetected) {
  std::vector<std::string> errs = collect_errors(3, GetParam(), [](Communicator& c) {
    std::vector<int32_t> buf(5, c.rank());
    if (c.rank() == 1) {
      c.all_reduce(buf.data(), 5, DataType::kInt32, ReduceOp::kSum);
    } else {
      c.broadcast(buf.data(), 5, DataType::kInt32, 0);
    }
    c.barrier();  // whoever got through must still learn of the failure
  });
  bool both = false;
  for (const auto& e : errs) {
    EXPECT_FALSE(e.empty());
    both |= contains(e, "broadcast #0") && contains(e, "all_reduce #0");
  }
  EXPECT_TRUE(both) << errs[0] << "\n" << errs[1] << "\n" << errs[2];
}

TEST_P(FailureTest, DtypeMismatchNeverWritesTheBuffer) {
  std::vector<int64_t> guarded(64, 77);
  std::vector<std::string> errs = collect_errors(2, GetParam(), [&](Communicator& c) {
    if (c.rank() == 0) {
      std::vector<float> big(4000, 2.0f);
      c.send(big.data(), big.size(), DataType::kFloat32, 1, 3);
      c.barrier();
    } else {
      // Asks for 8 int64 elements: a mismatch in both dtype and count.
      c.recv(guarded.data(), 8, DataType::kInt64, 0, 3);
    }
  });
  EXPECT_TRUE(contains(errs[1], "dtype=float32") && contains(errs[1], "dtype=int64")) << errs[1];
  EXPECT_FALSE(errs[0].empty());
  for (int64_t v : guarded) EXPECT_EQ(v, 77);
}

TEST_P(FailureTest, TagMismatchIsDetected) {
  std::vector<std::string> errs = collect_errors(2, GetParam(), [&](Communicator& c) {
    int32_t x = 5;
    if (c.rank() == 0) {
      c.send(&x, 1, DataType::kInt32, 1, 1);
      c.barrier();
    } else {
      c.recv(&x, 1, DataType::kInt32, 0, 2);
    }
  });
  EXPECT_TRUE(contains(errs[1], "tag=1") && contains(errs[1], "tag=2")) << errs[1];
  EXPECT_FALSE(errs[0].empty());
}

TEST_P(FailureTest, TimeoutNamesOpGroupSequenceAndMissingRank) {
  std::latch done(2);
  std::vector<std::string> errs = collect_errors(3, GetParam(), [&](Communicator& c) {
    c.barrier(5s);
    if (c.rank() == 2) {
      done.wait();  // never joins the all_reduce; stays connected until the others gave up
      return;
    }
    std::vector<float> buf(10);
    try {
      c.all_reduce(buf.data(), 10, DataType::kFloat32, ReduceOp::kSum, 300ms);
    } catch (const TimeoutError& e) {
      done.count_down();
      // The communicator stays broken: the next op throws at once.
      try {
        c.barrier();
      } catch (const TimeoutError&) {
        throw;
      }
      throw Error("barrier after a timeout did not throw");
    } catch (...) {
      done.count_down();
      throw;
    }
  });
  // Rank 2 passed the first barrier, so the collective sequence number is 1.
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errs[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(e, "all_reduce #1")) << e;
    EXPECT_TRUE(contains(e, "in group 'fail-")) << e;
    EXPECT_TRUE(contains(e, "timed out") || contains(e, "failed")) << e;
    if (GetParam() == TransportKind::kShm && contains(e, "timed out after")) {
      EXPECT_TRUE(contains(e, "did not arrive: [2]")) << e;
    }
  }
  EXPECT_TRUE(errs[2].empty()) << errs[2];
}

TEST_P(FailureTest, PeerThatLeftIsNamed) {
  std::latch left(1);
  std::vector<std::string> errs(2);
  rendezvous::HashStore store;
  auto opts = testing::options(GetParam(), "left");
  std::thread t1([&] {
    auto c = Communicator::create(store, 1, 2, opts);
    c->barrier();
    c.reset();
    left.count_down();
  });
  auto c0 = Communicator::create(store, 0, 2, opts);
  c0->barrier();
  left.wait();
  std::vector<float> buf(100);
  try {
    c0->all_reduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    ADD_FAILURE() << "all_reduce with a departed peer returned";
  } catch (const PeerLost& e) {
    EXPECT_TRUE(contains(e.what(), "rank 1")) << e.what();
  }
  t1.join();
}

TEST_P(FailureTest, AbortFromAnotherThreadEndsAPendingOp) {
  rendezvous::HashStore store;
  auto opts = testing::options(GetParam(), "abort");
  std::latch finished(1);
  std::thread t1([&] {
    auto c = Communicator::create(store, 1, 2, opts);
    finished.wait();  // never joins the all_reduce
  });
  auto c0 = Communicator::create(store, 0, 2, opts);
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    c0->abort("stopped by the test");
  });
  std::vector<float> buf(10);
  try {
    c0->all_reduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    ADD_FAILURE() << "all_reduce returned";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "stopped by the test")) << e.what();
  }
  EXPECT_TRUE(c0->broken());
  aborter.join();
  finished.count_down();
  t1.join();
}

INSTANTIATE_TEST_SUITE_P(Transports, FailureTest, ::testing::ValuesIn(testing::transports()),
                         [](const auto& info) { return testing::transport_label(info.param); });

}  // namespace
}  // namespace cohort::collectives
