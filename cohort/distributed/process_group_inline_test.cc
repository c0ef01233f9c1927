// The inline path of ProcessGroup (process_group.h, ProcessGroupStats): a
// blocking op on an idle group runs on the calling thread; with async ops in
// flight it queues behind them; ops issued while it runs queue behind it.
// Errors, sequence numbers and the flight recorder are the queued path's.
// Ranks are threads of this process (one HashStore), as in process_group_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/distributed/process_group.h"
#include "cohort/distributed/thread_ranks_testing.h"

namespace cohort::distributed {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

size_t count_of(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

using testing::run_ranks;

// Waits (up to 30 s) until pred() holds; the ranks' threads make it true.
void wait_until(const std::function<bool()>& pred, const char* what) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline)
      throw TimeoutError(std::string("test: timed out waiting until ") + what);
    std::this_thread::sleep_for(1ms);
  }
}

TEST(ProcessGroupInline, BlockingOpsOnAnIdleGroupRunOnTheCallingThread) {
  run_ranks(2, [](ProcessGroup& pg) {
    const ProcessGroupStats before = pg.stats();
    float v = 1.0f;
    for (int i = 0; i < 20; ++i) pg.all_reduce(&v, 1, DataType::kFloat32);
    EXPECT_EQ(v, 1048576.0f);  // 2^20: every op ran, once, in order
    Tensor t = Tensor::full({3}, 2.0);
    pg.all_reduce(t);
    pg.broadcast(t, {.root = 1});
    pg.barrier();
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>(3, 4.0f)));
    const ProcessGroupStats after = pg.stats();
    EXPECT_EQ(after.ops_inline - before.ops_inline, 23u);
    EXPECT_EQ(after.ops_queued, before.ops_queued);
    // Async ops always go through the queue.
    Work w = pg.all_reduce(&v, 1, DataType::kFloat32, {}, async_op);
    w.wait();
    EXPECT_EQ(pg.stats().ops_queued, before.ops_queued + 1);
    EXPECT_EQ(w.sequence(), 23u);  // numbered after the 23 inline collectives
  });
}

// An async op that cannot finish yet (its peer has not issued it) is in
// flight when the blocking op is issued: the blocking op must queue behind it.
TEST(ProcessGroupInline, BlockingOpQueuesBehindAsyncOpsInFlight) {
  // Set by a watcher thread of rank 0 once its blocking op is queued. (Rank 1
  // does not read rank 0's group: their shared-memory rings order them, but
  // each maps the rings at its own address, where ThreadSanitizer sees no order.)
  std::atomic<bool> rank0_queued{false};
  run_ranks(2, [&](ProcessGroup& pg) {
    std::vector<int32_t> buf(16, pg.rank() == 1 ? 3 : 0);
    const ProcessGroupStats before = pg.stats();
    if (pg.rank() == 0) {
      std::thread watcher([&] {
        wait_until([&] { return pg.stats().ops_queued >= before.ops_queued + 3; },
                   "rank 0 queued its blocking all_reduce");
        rank0_queued = true;
      });
      Work b = pg.broadcast(buf.data(), buf.size(), DataType::kInt32, {.root = 1}, async_op);
      Work s = pg.all_reduce(buf.data(), buf.size(), DataType::kInt32, {}, async_op);
      // Blocking: only issue order gives (3 + 3) * 2 = 12.
      pg.all_reduce(buf.data(), buf.size(), DataType::kInt32);
      watcher.join();
      EXPECT_TRUE(b.is_completed());
      EXPECT_TRUE(s.is_completed());
      EXPECT_LT(b.sequence(), s.sequence());
      EXPECT_EQ(pg.stats().ops_queued - before.ops_queued, 3u);
      EXPECT_EQ(pg.stats().ops_inline, before.ops_inline);
    } else {
      // Rank 0's ops cannot complete before this rank issues its own, so
      // when its blocking op is counted, the async ones were still in flight.
      wait_until([&] { return rank0_queued.load(); }, "rank 0 queued its blocking all_reduce");
      pg.broadcast(buf.data(), buf.size(), DataType::kInt32, {.root = 1});
      pg.all_reduce(buf.data(), buf.size(), DataType::kInt32);
      pg.all_reduce(buf.data(), buf.size(), DataType::kInt32);
    }
    EXPECT_EQ(buf, std::vector<int32_t>(16, 12));
  });
}

// Ops issued (from another thread) while an inline op runs queue behind it.
TEST(ProcessGroupInline, OpsIssuedDuringAnInlineOpRunAfterIt) {
  std::atomic<bool> async_issued{false};
  run_ranks(2, [&](ProcessGroup& pg) {
    std::vector<int32_t> buf(16, pg.rank() == 1 ? 5 : 0);
    const ProcessGroupStats before = pg.stats();
    if (pg.rank() == 0) {
      Work later;
      std::thread other([&] {
        // Once the blocking broadcast below runs inline (it cannot finish
        // before rank 1 joins it), issue an all_reduce of the same buffer.
        wait_until([&] { return pg.stats().ops_inline > before.ops_inline; },
                   "rank 0's broadcast runs inline");
        later = pg.all_reduce(buf.data(), buf.size(), DataType::kInt32, {}, async_op);
        async_issued = true;
      });
      pg.broadcast(buf.data(), buf.size(), DataType::kInt32, {.root = 1});
      other.join();
      later.wait();
      EXPECT_EQ(later.sequence(), 1u);  // after the broadcast's 0
      EXPECT_EQ(pg.stats().ops_queued - before.ops_queued, 1u);
    } else {
      wait_until([&] { return async_issued.load(); }, "rank 0 issued its async all_reduce");
      pg.broadcast(buf.data(), buf.size(), DataType::kInt32, {.root = 1});
      pg.all_reduce(buf.data(), buf.size(), DataType::kInt32);
    }
    // broadcast, then sum: 10 on both ranks; the other order gives 5 or 0.
    EXPECT_EQ(buf, std::vector<int32_t>(16, 10));
  });
}

// A failed inline op throws what its queued twin's Work rethrows: the op,
// group, rank and sequence number before the backend's message, its type kept.
TEST(ProcessGroupInline, FailuresNameOpGroupRankAndSequenceLikeQueuedOps) {
  for (bool async : {false, true}) {
    run_ranks(2, [&](ProcessGroup& pg) {
      pg.barrier();  // seq 0
      std::vector<float> buf(20, 1.0f);
      size_t count = pg.rank() == 0 ? 10 : 11;
      const ProcessGroupStats before = pg.stats();
      std::string prefix =
          "all_reduce (group 'test', rank " + std::to_string(pg.rank()) + ", seq 1): ";
      try {
        if (async) {
          pg.all_reduce(buf.data(), count, DataType::kFloat32, {}, async_op).wait();
        } else {
          pg.all_reduce(buf.data(), count, DataType::kFloat32);
        }
        ADD_FAILURE() << "mismatch not detected";
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
        EXPECT_TRUE(contains(e.what(), "10") && contains(e.what(), "11")) << e.what();
      } catch (const Error& e) {
        // The rank that learns of the mismatch second may see the peer's abort.
        EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
      }
      EXPECT_EQ(pg.stats().ops_inline - before.ops_inline, async ? 0u : 1u);
      // The group is broken either way: later ops fail at once.
      EXPECT_THROW(pg.barrier(), Error);
      EXPECT_EQ(buf, std::vector<float>(20, 1.0f));
    });
  }
}

TEST(ProcessGroupInline, TimeoutOfAnInlineOpNamesOpGroupSequence) {
  std::atomic<bool> done{false};
  run_ranks(2, [&](ProcessGroup& pg) {
    pg.barrier();  // seq 0
    if (pg.rank() == 1) {
      wait_until([&] { return done.load(); }, "rank 0's barrier timed out");
      return;
    }
    const ProcessGroupStats before = pg.stats();
    try {
      pg.barrier({.timeout = 200ms});  // rank 1 never joins it
      ADD_FAILURE() << "barrier did not time out";
    } catch (const TimeoutError& e) {
      std::string m = e.what();
      EXPECT_EQ(m.rfind("barrier (group 'test', rank 0, seq 1): ", 0), 0u) << m;
    }
    EXPECT_EQ(pg.stats().ops_inline - before.ops_inline, 1u);
    done = true;
  });
}

// Several threads per rank issue blocking and async ops at once, so claims
// race with pushes: every op runs once, the numbers are distinct, and the
// counts add up. (All ops are the same all_reduce, so any pairing between the
// ranks' threads matches.)
TEST(ProcessGroupInline, ConcurrentBlockingAndAsyncOpsFromSeveralThreads) {
  constexpr int kThreads = 3, kOps = 200;
  run_ranks(2, [](ProcessGroup& pg) {
    std::vector<std::vector<uint64_t>> seqs(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const float mine = static_cast<float>(pg.rank() + 1);
        std::vector<float> bufs(kOps, mine);
        std::vector<Work> works;
        for (int i = 0; i < kOps; ++i) {
          float* b = &bufs[static_cast<size_t>(i)];
          if ((i + t) % 3 == 0) {
            works.push_back(pg.all_reduce(b, 1, DataType::kFloat32, {}, async_op));
          } else {
            pg.all_reduce(b, 1, DataType::kFloat32);
            EXPECT_EQ(*b, 3.0f);
          }
        }
        for (Work& w : works) {
          w.wait();
          seqs[static_cast<size_t>(t)].push_back(w.sequence());
        }
        EXPECT_EQ(bufs, std::vector<float>(kOps, 3.0f));
      });
    }
    for (auto& th : threads) th.join();
    std::vector<uint64_t> all;
    for (auto& v : seqs) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a number given twice";
    EXPECT_LT(all.back(), uint64_t{kThreads * kOps});
    ProcessGroupStats s = pg.stats();
    EXPECT_EQ(s.ops_inline + s.ops_queued, uint64_t{kThreads * kOps});
  });
}

TEST(ProcessGroupInline, FlightRecorderSeesInlineOps) {
  run_ranks(2, [](ProcessGroup& pg) {
    int64_t v = 1;
    for (int i = 0; i < 7; ++i) pg.all_reduce(&v, 1, DataType::kInt64);
    EXPECT_EQ(v, 128);
    EXPECT_EQ(pg.stats().ops_queued, 0u);
    std::string record = pg.flight_record();
    EXPECT_EQ(count_of(record, "\"op\":\"all_reduce\""), 7u) << record;
  });
}

TEST(ProcessGroupInline, DestroyedGroupRefusesBlockingOps) {
  run_ranks(1, [](ProcessGroup& pg) {
    pg.destroy();
    try {
      pg.barrier();
      ADD_FAILURE() << "barrier on a destroyed group";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "barrier")) << e.what();
      EXPECT_TRUE(contains(e.what(), "destroyed")) << e.what();
    }
  });
}

}  // namespace
}  // namespace cohort::distributed
