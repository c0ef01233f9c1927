// WorkQueue and Work without any backend: order, exceptions, timeouts,
// running on the waiting thread, and closing.
#include "cohort/distributed/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::distributed {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<detail::WorkState> make_op(const std::shared_ptr<detail::WorkQueue>& q,
                                           const char* op, uint64_t seq,
                                           std::function<void()> body) {
  auto s = std::make_shared<detail::WorkState>();
  s->op = op;
  s->group = std::make_shared<const std::string>("grp");
  s->seq = seq;
  s->wait_limit = 10s;
  s->body = std::move(body);
  s->queue = q;
  return s;
}

TEST(WorkQueue, RunsOpsInIssueOrder) {
  auto q = std::make_shared<detail::WorkQueue>("test");
  std::vector<int> order;
  std::mutex mu;
  std::vector<Work> works;
  for (int i = 0; i < 50; ++i) {
    auto s = make_op(q, "op", static_cast<uint64_t>(i), [&, i] {
      std::lock_guard<std::mutex> lk(mu);
      order.push_back(i);
    });
    q->push(s);
    works.emplace_back(s);
  }
  // Waiting in reverse order may run some ops on this thread; order holds.
  for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  for (auto& w : works) EXPECT_TRUE(w.is_success());
}

TEST(WorkQueue, CompletionIsMonotonicInIssueOrder) {
  auto q = std::make_shared<detail::WorkQueue>("test");
  std::vector<Work> works;
  for (int i = 0; i < 200; ++i) {
    auto s = make_op(q, "op", static_cast<uint64_t>(i), [] { std::this_thread::yield(); });
    q->push(s);
    works.emplace_back(s);
  }
  // Whenever op k is complete, every op before it is too.
  for (int round = 0; round < 1000; ++round) {
    bool later_done = false;
    for (auto it = works.rbegin(); it != works.rend(); ++it) {
      bool done = it->is_completed();
      if (later_done) {
        ASSERT_TRUE(done);
      }
      later_done = later_done || done;
    }
    if (works.front().is_completed() && works.back().is_completed()) break;
  }
  works.back().wait();
}

TEST(WorkQueue, FailedOpRethrowsWithContextAndKeepsItsType) {
  auto q = std::make_shared<detail::WorkQueue>("grp");
  auto s = make_op(q, "all_reduce", 7, [] { throw PeerLost("rank 3 closed its connection"); });
  q->push(s);
  Work w(s);
  try {
    w.wait();
    FAIL() << "wait did not throw";
  } catch (const PeerLost& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("all_reduce"), std::string::npos) << m;
    EXPECT_NE(m.find("group 'grp'"), std::string::npos) << m;
    EXPECT_NE(m.find("seq 7"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 3"), std::string::npos) << m;
  }
  EXPECT_TRUE(w.is_completed());
  EXPECT_FALSE(w.is_success());
  EXPECT_NE(w.exception(), nullptr);
  // A later op still runs: the queue itself survives a failed op.
  auto s2 = make_op(q, "barrier", 8, [] {});
  q->push(s2);
  Work(s2).wait();
}

TEST(WorkQueue, WaitWithTimeoutThrowsAndLeavesTheOpPending) {
  auto q = std::make_shared<detail::WorkQueue>("grp");
  std::latch release(1);
  auto s = make_op(q, "barrier", 1, [&] { release.wait(); });
  q->push(s);
  Work w(s);
  EXPECT_THROW(w.wait(30ms), TimeoutError);
  EXPECT_FALSE(w.is_completed());
  EXPECT_EQ(w.exception(), nullptr);
  release.count_down();
  w.wait();
  EXPECT_TRUE(w.is_success());
}

TEST(WorkQueue, TimeoutMessageNamesTheOp) {
  auto q = std::make_shared<detail::WorkQueue>("grp");
  std::latch release(1);
  auto s = make_op(q, "reduce_scatter", 4, [&] { release.wait(); });
  q->push(s);
  try {
    Work(s).wait(10ms);
    FAIL();
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("reduce_scatter (group 'grp', rank 0, seq 4)"), std::string::npos) << m;
  }
  release.count_down();
  Work(s).wait();
}

TEST(WorkQueue, WaitRunsAQueuedOpOnTheWaitingThread) {
  auto q = std::make_shared<detail::WorkQueue>("grp");
  // Occupy the queue's thread, then queue an op and wait for it while the
  // first still runs: the waiter cannot run it (one op at a time) ...
  std::latch started(1), release(1);
  auto blocker = make_op(q, "a", 0, [&] {
    started.count_down();
    release.wait();
  });
  q->push(blocker);
  started.wait();
  std::thread::id ran_on;
  auto s = make_op(q, "b", 1, [&] { ran_on = std::this_thread::get_id(); });
  q->push(s);
  EXPECT_THROW(Work(s).wait(20ms), TimeoutError);
  release.count_down();
  Work(s).wait();
  EXPECT_NE(ran_on, std::thread::id());
  // ... and once the queue is idle, an op can run on whichever thread gets it
  // first; both must give the same result.
  std::atomic<int> runs{0};
  std::vector<Work> ws;
  for (int i = 0; i < 100; ++i) {
    auto t = make_op(q, "c", static_cast<uint64_t>(2 + i), [&] { runs++; });
    q->push(t);
    ws.emplace_back(t);
    ws.back().wait();
  }
  EXPECT_EQ(runs.load(), 100);
}

TEST(WorkQueue, ClaimOnlyWhenIdleAndOpsPushedMeanwhileWaitForRelease) {
  auto q = std::make_shared<detail::WorkQueue>("grp");
  std::latch started(1), release(1);
  auto blocker = make_op(q, "a", 0, [&] {
    started.count_down();
    release.wait();
  });
  q->push(blocker);
  started.wait();
  EXPECT_FALSE(q->try_claim());  // an op runs
  release.count_down();
  Work(blocker).wait();
  // The queue's thread counts the op finished just after its waiters woke.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  bool claimed = false;
  while (!(claimed = q->try_claim()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_TRUE(claimed);
  EXPECT_FALSE(q->try_claim());  // one claim at a time
  std::atomic<bool> ran{false};
  auto s = make_op(q, "b", 1, [&] { ran = true; });
  q->push(s);
  EXPECT_EQ(q->pending(), 2u);  // the claimed op and b
  // Neither the queue's thread nor a waiter may run b during the claim.
  EXPECT_THROW(Work(s).wait(20ms), TimeoutError);
  EXPECT_FALSE(ran.load());
  q->release();
  Work(s).wait();
  EXPECT_TRUE(ran.load());
}

TEST(WorkQueue, NumberedPushesAndClaimsShareOneSequence) {
  auto q = std::make_shared<detail::WorkQueue>("grp");
  uint64_t seq = 99;
  ASSERT_TRUE(q->try_claim(true, &seq));
  EXPECT_EQ(seq, 0u);
  // Pushed during the claim: runs after it, numbered after it.
  auto a = make_op(q, "a", 42, [] {});
  q->push(a, /*numbered=*/true);
  EXPECT_EQ(a->seq, 1u);
  auto unnumbered = make_op(q, "send", 42, [] {});
  q->push(unnumbered);
  EXPECT_EQ(unnumbered->seq, 42u);
  q->release();
  Work(a).wait();
  Work(unnumbered).wait();
  auto deadline = std::chrono::steady_clock::now() + 10s;
  bool claimed = false;
  while (!(claimed = q->try_claim(true, &seq)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_TRUE(claimed);
  EXPECT_EQ(seq, 2u);
  q->release();
}

TEST(WorkQueue, CloseWaitsForTheClaimedOp) {
  auto q = std::make_shared<detail::WorkQueue>("grp");
  ASSERT_TRUE(q->try_claim());
  std::atomic<bool> released{false}, closed{false};
  std::thread closer([&] {
    q->close();
    EXPECT_TRUE(released.load()) << "close returned while an op was claimed";
    closed = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(closed.load());
  released = true;
  q->release();
  closer.join();
  EXPECT_TRUE(closed.load());
}

TEST(WorkQueue, CloseRunsQueuedOpsAndRefusesNewOnes) {
  auto q = std::make_shared<detail::WorkQueue>("grp");
  std::atomic<int> runs{0};
  std::vector<Work> ws;
  for (int i = 0; i < 10; ++i) {
    auto s = make_op(q, "op", static_cast<uint64_t>(i), [&] {
      std::this_thread::sleep_for(1ms);
      runs++;
    });
    q->push(s);
    ws.emplace_back(s);
  }
  q->close();
  EXPECT_EQ(runs.load(), 10);
  for (auto& w : ws) EXPECT_TRUE(w.is_success());
  EXPECT_THROW(q->push(make_op(q, "late", 99, [] {})), Error);
}

TEST(Work, UndefinedWorkThrowsInvalidArgument) {
  Work w;
  EXPECT_FALSE(w.defined());
  EXPECT_THROW(w.wait(), InvalidArgument);
  EXPECT_THROW(w.is_completed(), InvalidArgument);
}

TEST(Work, CompletedWorkCarriesItsError) {
  Work ok = Work::completed("noop");
  EXPECT_TRUE(ok.is_success());
  ok.wait();
  Work bad = Work::completed("noop", std::make_exception_ptr(TimeoutError("late")));
  EXPECT_TRUE(bad.is_completed());
  EXPECT_THROW(bad.wait(), TimeoutError);
}

}  // namespace
}  // namespace cohort::distributed
