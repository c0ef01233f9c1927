#include "cohort/base/parallel.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cohort {

TEST(ParallelFor, CoversRangeExactlyOnce) {
  ThreadBudgetGuard guard(4);
  std::vector<std::atomic<int>> hits(1001);
  parallel_for(0, 1001, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ParallelFor, RespectsGrainAndEmptyRange) {
  ThreadBudgetGuard guard(8);
  std::atomic<int> calls{0};
  parallel_for(0, 10, 100, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
    calls++;
  });
  EXPECT_EQ(calls.load(), 1);
  parallel_for(5, 5, 1, [&](int64_t, int64_t) { calls++; });
  EXPECT_EQ(calls.load(), 1);
}

TEST(ParallelFor, RethrowsBodyException) {
  ThreadBudgetGuard guard(3);
  EXPECT_THROW(parallel_for(0, 30, 1,
                            [](int64_t b, int64_t) {
                              if (b > 0) throw std::runtime_error("chunk failed");
                            }),
               std::runtime_error);
}

TEST(ParallelFor, ManyConcurrentCallers) {
  std::vector<std::thread> ts;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      ThreadBudgetGuard guard(2);
      for (int r = 0; r < 50; ++r) {
        parallel_for(0, 100, 1, [&](int64_t b, int64_t e) { total += e - b; });
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 100);
}

TEST(ParallelFor, WorksInForkedChildAfterPoolStarted) {
  ThreadBudgetGuard guard(4);
  parallel_for(0, 100, 1, [](int64_t, int64_t) {});  // pool threads exist now
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int64_t> total{0};
    parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) { total += e - b; });
    _exit(total.load() == 1000 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ThreadBudget, IsPerThread) {
  ThreadBudgetGuard guard(3);
  EXPECT_EQ(num_threads(), 3);
  int other = 0;
  std::thread([&] {
    set_num_threads(1);
    other = num_threads();
  }).join();
  EXPECT_EQ(other, 1);
  EXPECT_EQ(num_threads(), 3);
}

}  // namespace cohort
