// ProcessGroup::recv_any (PyTorch's recv without src) over the native
// backend, ranks on threads, over shared memory and TCP at 2, 3 and 4 ranks:
// blocking and async, raw buffers and tensors, Work::source_rank, ordinary
// send/recv afterwards on the same pairs, the op's timeout, a peer's abort
// and the argument checks. The rules themselves (peers passed over, a killed
// peer) are tested in collectives/point_to_point_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/distributed/process_group.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::distributed {
namespace {

using namespace std::chrono_literals;
using collectives::TransportKind;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// fn(group) as n ranks of a native group over `transport`, on threads.
void run_ranks(int n, TransportKind transport, const std::function<void(ProcessGroup&)>& fn,
               Duration timeout = 30s) {
  ProcessGroupOptions o;
  o.name = "any";
  o.timeout = timeout;
  o.transport = transport;
  testing::run_ranks_with(n, o, [&](std::shared_ptr<ProcessGroup> pg) { fn(*pg); });
}

class ProcessGroupRecvAny : public ::testing::TestWithParam<TransportKind> {};

TEST_P(ProcessGroupRecvAny, GetsEverySenderOnceBlockingAndAsync) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    run_ranks(n, GetParam(), [&](ProcessGroup& pg) {
      const int r = pg.rank();
      if (r != 0) {
        // Two messages per sender: a tensor, then a raw buffer.
        pg.send(Tensor::full({1}, 10.0 * r), 0, {.tag = 2});
        int64_t x = 100 + r;
        pg.send(&x, 1, DataType::kInt64, 0, {.tag = 3});
      } else {
        std::vector<int> seen;
        for (int i = 1; i < n; ++i) {
          Tensor t = Tensor::zeros({1});
          int src = pg.recv_any(t, {.tag = 2});
          ASSERT_TRUE(src >= 1 && src < n) << src;
          EXPECT_EQ(t.to_vector<float>()[0], 10.0f * static_cast<float>(src));
          seen.push_back(src);
        }
        std::sort(seen.begin(), seen.end());
        for (int i = 1; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i - 1)], i);
        // Async: one Work per sender, issued together, each naming its source.
        std::vector<int64_t> got(static_cast<size_t>(n - 1), -1);
        std::vector<Work> works;
        for (int i = 0; i < n - 1; ++i) {
          works.push_back(
              pg.recv_any(&got[static_cast<size_t>(i)], 1, DataType::kInt64, {.tag = 3}, async_op));
        }
        seen.clear();
        for (int i = 0; i < n - 1; ++i) {
          Work& w = works[static_cast<size_t>(i)];
          w.wait();
          EXPECT_STREQ(w.op(), "recv_any");
          int src = w.source_rank();
          EXPECT_EQ(got[static_cast<size_t>(i)], 100 + src);
          seen.push_back(src);
        }
        std::sort(seen.begin(), seen.end());
        for (int i = 1; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i - 1)], i);
      }
      // Ordinary send/recv on the same pairs still agree on their message
      // numbers, then a collective.
      if (r == 0) {
        for (int p = 1; p < n; ++p) {
          int32_t y = 7 * p;
          pg.send(&y, 1, DataType::kInt32, p, {.tag = 4});
          pg.recv(&y, 1, DataType::kInt32, p, {.tag = 5});
          EXPECT_EQ(y, 8 * p);
        }
      } else {
        int32_t y = -1;
        pg.recv(&y, 1, DataType::kInt32, 0, {.tag = 4});
        EXPECT_EQ(y, 7 * r);
        y = 8 * r;
        pg.send(&y, 1, DataType::kInt32, 0, {.tag = 5});
      }
      pg.barrier();
    });
  }
}

TEST_P(ProcessGroupRecvAny, SourceRankIsKnownOnlyOnceCompleted) {
  std::latch checked(1);
  run_ranks(2, GetParam(), [&](ProcessGroup& pg) {
    float x = 3.5f;
    if (pg.rank() == 1) {
      checked.wait();  // sends only after rank 0 looked at the pending Work
      pg.send(&x, 1, DataType::kFloat32, 0, {.tag = 1});
      return;
    }
    float y = 0;
    Work w = pg.recv_any(&y, 1, DataType::kFloat32, {.tag = 1}, async_op);
    EXPECT_EQ(w.source_rank(), -1);
    EXPECT_FALSE(w.is_completed());
    checked.count_down();
    w.wait();
    EXPECT_EQ(w.source_rank(), 1);
    EXPECT_EQ(y, 3.5f);
    // Other ops have no source.
    EXPECT_EQ(pg.barrier({}, async_op).source_rank(), -1);
  });
}

TEST_P(ProcessGroupRecvAny, ATagNoPeerSendsTimesOut) {
  // One world size (collectives/point_to_point_test.cc has them all): the
  // failing rank waits up to a second for the silent peers' flight records.
  std::latch gave_up(1);
  run_ranks(3, GetParam(), [&](ProcessGroup& pg) {
    if (pg.rank() != 0) {
      gave_up.wait();
      return;
    }
    Tensor t = Tensor::zeros({1});
    Work w = pg.recv_any(t, {.tag = 99, .timeout = 200ms}, async_op);
    try {
      w.wait();
      ADD_FAILURE() << "recv_any of a tag nobody sends returned";
    } catch (const TimeoutError& e) {
      std::string m = e.what();
      EXPECT_TRUE(contains(m, "recv_any (group 'any', rank 0)")) << m;
      EXPECT_TRUE(contains(m, "tag=99") && contains(m, "timed out after 200 ms")) << m;
    }
    EXPECT_EQ(w.source_rank(), -1);
    gave_up.count_down();
    // The group is broken: the blocking form fails at once.
    EXPECT_THROW(pg.recv_any(t), TimeoutError);
  });
}

TEST_P(ProcessGroupRecvAny, APeerThatAbortsEndsIt) {
  run_ranks(3, GetParam(), [&](ProcessGroup& pg) {
    pg.barrier();
    if (pg.rank() == 2) {
      pg.abort("stopped by the test");
      return;
    }
    int32_t x = 0;
    try {
      if (pg.rank() == 0) pg.recv_any(&x, 1, DataType::kInt32);
      if (pg.rank() == 1) pg.recv(&x, 1, DataType::kInt32, 0);
      ADD_FAILURE() << "the receive returned although rank 2 aborted";
    } catch (const Error& e) {
      if (pg.rank() == 0) {
        EXPECT_TRUE(contains(e.what(), "recv_any (group 'any', rank 0)")) << e.what();
        EXPECT_TRUE(contains(e.what(), "stopped by the test")) << e.what();
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, ProcessGroupRecvAny,
                         ::testing::Values(TransportKind::kShm, TransportKind::kTcp),
                         [](const auto& info) {
                           return info.param == TransportKind::kTcp ? "tcp" : "shm";
                         });

TEST(ProcessGroupRecvAnyArgs, NeedsAPeerAndAContiguousTensor) {
  run_ranks(1, TransportKind::kAuto, [](ProcessGroup& pg) {
    float x = 0;
    EXPECT_THROW(pg.recv_any(&x, 1, DataType::kFloat32), InvalidArgument);
  });
  run_ranks(2, TransportKind::kAuto, [](ProcessGroup& pg) {
    EXPECT_THROW(pg.recv_any(Tensor()), InvalidArgument);
    EXPECT_THROW(pg.recv_any(Tensor::zeros({2, 3}).transpose(0, 1)), InvalidArgument);
    EXPECT_THROW(pg.recv_any(nullptr, 4, DataType::kFloat32), InvalidArgument);
    pg.barrier();  // argument errors do not break the group
  });
}

}  // namespace
}  // namespace cohort::distributed
