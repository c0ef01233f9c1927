// Point-to-point: recv_any (a receive from whichever peer's matching send
// arrives first) over shared memory and TCP at 2, 3 and 4 ranks: each sender
// once with its payload and rank, later send/recv and collectives on the same
// pairs, peers passed over (another tag, a collective, a peer that left), a
// mismatch with the chosen sender, no possible sender, a timeout, a peer that
// aborts or is killed. Every case ends in a result or an exception, never a
// hang.
#include "cohort/collectives/point_to_point.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "cohort/collectives/test_util.h"

namespace cohort::collectives {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

int32_t payload(int rank, int i) { return 1000 * rank + i; }

class RecvAnyTest : public ::testing::TestWithParam<TransportKind> {};

TEST_P(RecvAnyTest, GetsEverySenderOnceThenSendAndRecvStillWork) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    testing::run_threads(n, testing::options(GetParam(), "any"), [&](Communicator& c) {
      if (c.rank() != 0) {
        int32_t x = payload(c.rank(), 0);
        c.send(&x, 1, DataType::kInt32, 0, 3);
        c.send(nullptr, 0, DataType::kInt32, 0, 6);  // an empty message
      } else {
        std::vector<int> seen, empty_from;
        for (int i = 1; i < n; ++i) {
          int32_t x = -1;
          int src = c.recv_any(&x, 1, DataType::kInt32, 3);
          ASSERT_GE(src, 1);
          ASSERT_LT(src, n);
          EXPECT_EQ(x, payload(src, 0)) << "from rank " << src;
          seen.push_back(src);
        }
        for (int i = 1; i < n; ++i)
          empty_from.push_back(c.recv_any(nullptr, 0, DataType::kInt32, 6));
        std::sort(seen.begin(), seen.end());
        std::sort(empty_from.begin(), empty_from.end());
        for (int i = 1; i < n; ++i) {
          EXPECT_EQ(seen[static_cast<size_t>(i - 1)], i);
          EXPECT_EQ(empty_from[static_cast<size_t>(i - 1)], i);
        }
        const std::string record = c.flight_record_json();
        EXPECT_TRUE(contains(record, R"("op":"recv_any")")) << record;
      }
      // The pairs' message numbers still agree: plain recv/send both ways,
      // then a collective.
      if (c.rank() == 0) {
        for (int p = 1; p < n; ++p) {
          int32_t y = payload(0, p);
          c.send(&y, 1, DataType::kInt32, p, 4);
        }
        for (int p = 1; p < n; ++p) {
          int32_t y = -1;
          c.recv(&y, 1, DataType::kInt32, p, 5);
          EXPECT_EQ(y, payload(p, 1));
        }
      } else {
        int32_t y = -1;
        c.recv(&y, 1, DataType::kInt32, 0, 4);
        EXPECT_EQ(y, payload(0, c.rank()));
        y = payload(c.rank(), 1);
        c.send(&y, 1, DataType::kInt32, 0, 5);
      }
      int32_t sum = c.rank();
      c.all_reduce(&sum, 1, DataType::kInt32, ReduceOp::kSum);
      EXPECT_EQ(sum, n * (n - 1) / 2);
    });
  }
}

TEST_P(RecvAnyTest, SendersThatLeaveRightAfterSendingAreStillReceived) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    // Each sender closes its communicator as soon as its send returned: its
    // message is read after it left, and a peer that left with nothing more
    // to read is passed over.
    testing::run_threads(n, testing::options(GetParam(), "any-left"), [&](Communicator& c) {
      if (c.rank() != 0) {
        int32_t x = payload(c.rank(), 7);
        c.send(&x, 1, DataType::kInt32, 0, 1);
        return;
      }
      std::vector<int> seen;
      for (int i = 1; i < n; ++i) {
        int32_t x = -1;
        int src = c.recv_any(&x, 1, DataType::kInt32, 1);
        EXPECT_EQ(x, payload(src, 7));
        seen.push_back(src);
      }
      std::sort(seen.begin(), seen.end());
      for (int i = 1; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i - 1)], i);
    });
  }
}

TEST_P(RecvAnyTest, LargeMessagesFromEveryPeer) {
  // Larger than a shared-memory ring and a socket buffer: the chosen
  // sender's payload streams in after its header.
  const size_t count = size_t{1} << 20;
  testing::run_threads(3, testing::options(GetParam(), "any-large"), [&](Communicator& c) {
    if (c.rank() != 0) {
      std::vector<float> out(count);
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(c.rank() * 7 + i % 1000);
      c.send(out.data(), count, DataType::kFloat32, 0, 2);
      return;
    }
    std::vector<int> seen;
    for (int i = 0; i < 2; ++i) {
      std::vector<float> in(count, -1.0f);
      int src = c.recv_any(in.data(), count, DataType::kFloat32, 2);
      seen.push_back(src);
      size_t bad = 0;
      for (size_t k = 0; k < count; ++k) bad += in[k] != static_cast<float>(src * 7 + k % 1000);
      EXPECT_EQ(bad, 0u) << "from rank " << src;
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<int>{1, 2}));
  });
}

TEST_P(RecvAnyTest, PassesOverPeersWhoseNextMessageIsAnotherTagOrACollective) {
  testing::run_threads(4, testing::options(GetParam(), "any-pass"), [&](Communicator& c) {
    int32_t x = payload(c.rank(), 0);
    int32_t sum = 1;
    switch (c.rank()) {
      case 0: {
        int32_t y = -1;
        EXPECT_EQ(c.recv_any(&y, 1, DataType::kInt32, 7), 3);
        EXPECT_EQ(y, payload(3, 0));
        // The passed-over messages are still there, in order.
        c.recv(&y, 1, DataType::kInt32, 1, 5);
        EXPECT_EQ(y, payload(1, 0));
        break;
      }
      case 1:
        c.send(&x, 1, DataType::kInt32, 0, 5);  // another tag
        break;
      case 2:
        break;  // straight into the all_reduce: its header is its next message
      case 3:
        c.send(&x, 1, DataType::kInt32, 0, 7);
        break;
    }
    c.all_reduce(&sum, 1, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(sum, 4);
  });
}

// Shared memory only: it needs every message in before the first receive,
// which a sent message is at once in a ring (over TCP it may still be in
// flight).
TEST(RecvAny, ServesPeersInTurn) {
  std::latch sent(2);
  testing::run_threads(3, testing::options(TransportKind::kShm, "any-turn"), [&](Communicator& c) {
    if (c.rank() != 0) {
      for (int i = 0; i < 2; ++i) {
        int32_t x = payload(c.rank(), i);
        c.send(&x, 1, DataType::kInt32, 0, 0);
      }
      sent.count_down();
      c.barrier();
      return;
    }
    sent.wait();
    std::vector<int> order;
    for (int i = 0; i < 4; ++i) {
      int32_t y = -1;
      order.push_back(c.recv_any(&y, 1, DataType::kInt32, 0));
      EXPECT_EQ(y, payload(order.back(), i / 2));
    }
    EXPECT_EQ(order, (std::vector<int>{1, 2, 1, 2}));
    c.barrier();
  });
}

// Runs fn on n threads and collects each rank's exception message ("" when none).
std::vector<std::string> collect_errors(int n, TransportKind t,
                                        const std::function<void(Communicator&)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  testing::run_threads(n, testing::options(t, "any-fail", 20s), [&](Communicator& c) {
    try {
      fn(c);
    } catch (const Error& e) {
      errors[static_cast<size_t>(c.rank())] = e.what();
    }
  });
  return errors;
}

TEST_P(RecvAnyTest, CountMismatchWithTheChosenSenderNamesBothSides) {
  std::vector<std::string> errs = collect_errors(2, GetParam(), [](Communicator& c) {
    std::vector<int32_t> buf(4, 9);
    if (c.rank() == 1) {
      c.send(buf.data(), 2, DataType::kInt32, 0, 3);
      c.barrier();
      return;
    }
    try {
      c.recv_any(buf.data(), 1, DataType::kInt32, 3);
    } catch (const InvalidArgument&) {
      EXPECT_EQ(buf[0], 9);  // no byte written
      throw;
    }
  });
  EXPECT_TRUE(contains(errs[0], "rank 0 called recv_any (count=1") &&
              contains(errs[0], "rank 1 called send #0 (count=2"))
      << errs[0];
  EXPECT_FALSE(errs[1].empty());
}

TEST_P(RecvAnyTest, FailsAtOnceWhenNoPeerCanSend) {
  // Every peer's next message is something else: nothing can ever match, so
  // the op fails without waiting for its (long) timeout.
  std::vector<std::string> errs = collect_errors(3, GetParam(), [](Communicator& c) {
    int32_t x = 1;
    if (c.rank() == 1) c.send(&x, 1, DataType::kInt32, 0, 5);
    if (c.rank() != 0) {
      c.barrier();
      return;
    }
    try {
      c.recv_any(&x, 1, DataType::kInt32, 6);
    } catch (const TimeoutError& e) {
      throw Error(std::string("timed out instead: ") + e.what());
    }
  });
  EXPECT_TRUE(contains(errs[0], "recv_any (count=1, dtype=int32, tag=6") &&
              contains(errs[0], "rank 1's next message is send #0") &&
              contains(errs[0], "rank 2's next message is barrier #0"))
      << errs[0];
  EXPECT_FALSE(errs[1].empty());
  EXPECT_FALSE(errs[2].empty());
}

TEST_P(RecvAnyTest, ATagNoPeerSendsTimesOutNamingTheOp) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::latch gave_up(1);
    std::vector<std::string> errs = collect_errors(n, GetParam(), [&](Communicator& c) {
      if (c.rank() != 0) {
        gave_up.wait();  // stays connected, sends nothing
        return;
      }
      int32_t x = 0;
      try {
        c.recv_any(&x, 1, DataType::kInt32, 99, 200ms);
      } catch (...) {
        gave_up.count_down();
        throw;
      }
      gave_up.count_down();
    });
    EXPECT_TRUE(contains(errs[0], "recv_any (count=1, dtype=int32, tag=99") &&
                contains(errs[0], "timed out after 200 ms on rank 0"))
        << errs[0];
    std::string waiting = "still waiting on ranks [1";
    for (int p = 2; p < n; ++p) waiting += ", " + std::to_string(p);
    EXPECT_TRUE(contains(errs[0], waiting + "]")) << errs[0];
  }
}

TEST_P(RecvAnyTest, PeersThatLeftArePassedOverUntilNoneIsLeft) {
  rendezvous::HashStore store;
  auto opts = testing::options(GetParam(), "any-gone");
  std::latch two_left(1), one_sent(1), one_left(1);
  std::thread t2([&] {
    auto c = Communicator::create(store, 2, 3, opts);
    c->barrier();
    c.reset();  // leaves without sending
    two_left.count_down();
  });
  std::thread t1([&] {
    auto c = Communicator::create(store, 1, 3, opts);
    c->barrier();
    two_left.wait();
    int32_t x = 11;
    c->send(&x, 1, DataType::kInt32, 0, 0);
    one_sent.count_down();
    c.reset();
    one_left.count_down();
  });
  try {
    auto c0 = Communicator::create(store, 0, 3, opts);
    c0->barrier();
    two_left.wait();
    int32_t y = 0;
    EXPECT_EQ(c0->recv_any(&y, 1, DataType::kInt32, 0), 1);
    EXPECT_EQ(y, 11);
    one_left.wait();
    try {
      c0->recv_any(&y, 1, DataType::kInt32, 0);
      ADD_FAILURE() << "recv_any with every peer gone returned";
    } catch (const PeerLost& e) {
      EXPECT_TRUE(contains(e.what(), "rank 1 closed its communicator") &&
                  contains(e.what(), "rank 2 closed its communicator"))
          << e.what();
    }
  } catch (const Error& e) {
    ADD_FAILURE() << "rank 0: " << e.what();
  }
  t1.join();
  t2.join();
}

TEST_P(RecvAnyTest, APeerThatAbortsEndsTheReceive) {
  std::vector<std::string> errs = collect_errors(3, GetParam(), [](Communicator& c) {
    c.barrier();
    if (c.rank() == 2) {
      c.abort("stopped by the test");
      return;
    }
    int32_t x = 0;
    if (c.rank() == 0) c.recv_any(&x, 1, DataType::kInt32, 0);
    if (c.rank() == 1) c.recv(&x, 1, DataType::kInt32, 0, 0);
  });
  EXPECT_TRUE(contains(errs[0], "rank 2 of group") && contains(errs[0], "stopped by the test"))
      << errs[0];
  EXPECT_FALSE(errs[1].empty());
}

TEST_P(RecvAnyTest, AKilledPeerIsNamed) {
  std::string name = testing::unique_name("any-kill");
  const TransportKind transport = GetParam();
  auto status = testing::run_processes(3, 60s, [&](int rank, rendezvous::Store& store) {
    CommunicatorOptions o;
    o.name = name;
    o.transport = transport;
    o.timeout = 120s;  // beyond the test's limit: only liveness can end the wait
    auto comm = Communicator::create(store, rank, 3, o);
    comm->barrier();
    if (rank == 2) {
      std::this_thread::sleep_for(50ms);
      ::raise(SIGKILL);
    }
    int32_t x = 0;
    try {
      if (rank == 0) comm->recv_any(&x, 1, DataType::kInt32, 0);
      if (rank == 1) comm->recv(&x, 1, DataType::kInt32, 0, 0);  // ends when rank 0 fails
    } catch (const PeerLost& e) {
      if (contains(e.what(), "rank 2")) return;
      throw;
    }
    throw Error("the receive returned although rank 2 died");
  });
  EXPECT_TRUE(testing::exited_ok(status[0]));
  EXPECT_TRUE(testing::exited_ok(status[1]));
  EXPECT_TRUE(WIFSIGNALED(status[2]));
}

INSTANTIATE_TEST_SUITE_P(Transports, RecvAnyTest, ::testing::ValuesIn(testing::transports()),
                         [](const auto& info) { return testing::transport_label(info.param); });

}  // namespace
}  // namespace cohort::collectives
