// ProcessGroup with the native backend, ranks on threads of this process
// (one HashStore): tensor overloads, argument checks, Work semantics through
// real collectives, failures surfacing through Work, subgroups, destroy.
// The multi-process suite over every world size is in tests/distributed.
#include "cohort/distributed/process_group.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <functional>
#include <latch>
#include <mutex>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::distributed {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

using testing::run_ranks;

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(ProcessGroup, TensorAllReduceBroadcastReduce) {
  run_ranks(3, [](ProcessGroup& pg) {
    float r = static_cast<float>(pg.rank());
    Tensor t = Tensor::from_vector<float>({r, 2 * r, 1}, {3});
    pg.all_reduce(t);
    EXPECT_EQ(values(t), (std::vector<float>{3, 6, 3}));
    pg.all_reduce(t, {.op = ReduceOp::kMax});
    EXPECT_EQ(values(t), (std::vector<float>{3, 6, 3}));
    Tensor avg = Tensor::full({2, 2}, 3.0 * r);
    pg.all_reduce(avg, {.op = ReduceOp::kAvg});
    EXPECT_EQ(values(avg), (std::vector<float>(4, 3.0f)));
    Tensor b = Tensor::full({5}, r, kInt64);
    pg.broadcast(b, {.root = 2});
    EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>(5, 2)));
    Tensor red = Tensor::full({4}, r + 1, kFloat64);
    pg.reduce(red, {.op = ReduceOp::kProduct, .root = 1});
    EXPECT_EQ(red.to_vector<double>(), (std::vector<double>(4, pg.rank() == 1 ? 6.0 : r + 1)));
  });
}

TEST(ProcessGroup, TensorGatherScatterAndAllToAll) {
  run_ranks(3, [](ProcessGroup& pg) {
    const int n = pg.size();
    const float r = static_cast<float>(pg.rank());
    Tensor in = Tensor::from_vector<float>({r, r + 10}, {2});
    std::vector<Tensor> outs;
    for (int i = 0; i < n; ++i) outs.push_back(Tensor::zeros({2}));
    pg.all_gather(outs, in);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(values(outs[static_cast<size_t>(i)]), (std::vector<float>{float(i), i + 10.0f}));
    }
    Tensor flat = Tensor::zeros({n, 2});
    pg.all_gather_into_tensor(flat, in);
    EXPECT_EQ(values(flat), (std::vector<float>{0, 10, 1, 11, 2, 12}));

    std::vector<Tensor> gathered;
    if (pg.rank() == 1) {
      for (int i = 0; i < n; ++i) gathered.push_back(Tensor::zeros({2}));
    }
    pg.gather(gathered, in, {.root = 1});
    if (pg.rank() == 1) {
      EXPECT_EQ(values(gathered[2]), (std::vector<float>{2, 12}));
    }

    std::vector<Tensor> parts;
    if (pg.rank() == 0) {
      for (int i = 0; i < n; ++i) parts.push_back(Tensor::full({2}, 100.0 + i));
    }
    Tensor got = Tensor::zeros({2});
    pg.scatter(got, parts, {.root = 0});
    EXPECT_EQ(values(got), (std::vector<float>(2, 100.0f + r)));

    std::vector<Tensor> rs_in;
    for (int i = 0; i < n; ++i) rs_in.push_back(Tensor::full({3}, i * 10.0 + r));
    Tensor rs_out = Tensor::zeros({3});
    pg.reduce_scatter(rs_out, rs_in);
    EXPECT_EQ(values(rs_out), (std::vector<float>(3, 30.0f * r + 3.0f)));
    Tensor rs_flat = Tensor::arange(0.0, 3.0 * n, 1.0);  // [0, 1, ..., 8] on every rank
    Tensor rs_one = Tensor::zeros({3});
    pg.reduce_scatter_tensor(rs_one, rs_flat);
    EXPECT_EQ(values(rs_one), (std::vector<float>{9 * r, 9 * r + 3, 9 * r + 6}));

    std::vector<Tensor> a2a_in, a2a_out;
    for (int j = 0; j < n; ++j) {
      a2a_in.push_back(Tensor::full({1}, 10.0 * r + j, kInt32));
      a2a_out.push_back(Tensor::zeros({1}, kInt32));
    }
    pg.all_to_all(a2a_out, a2a_in);
    for (int j = 0; j < n; ++j) {
      EXPECT_EQ(a2a_out[static_cast<size_t>(j)].item<int>(), 10 * j + pg.rank());
    }
    Tensor single_in = Tensor::arange(0.0, 2.0 * n, 1.0);
    single_in.add_(100.0 * r);
    Tensor single_out = Tensor::zeros({2 * n});
    pg.all_to_all_single(single_out, single_in);
    std::vector<float> want;
    for (int j = 0; j < n; ++j) {
      want.push_back(100.0f * j + 2 * r);
      want.push_back(100.0f * j + 2 * r + 1);
    }
    EXPECT_EQ(values(single_out), want);
  });
}

TEST(ProcessGroup, TensorSendRecvRing) {
  run_ranks(3, [](ProcessGroup& pg) {
    const int n = pg.size(), r = pg.rank();
    Tensor out = Tensor::full({1000}, r);
    Tensor in = Tensor::zeros({1000});
    // Even ranks send first, odd ranks receive first: no cycle of senders.
    Work a, b;
    if (r % 2 == 0) {
      a = pg.send(out, (r + 1) % n, {.tag = 5}, async_op);
      b = pg.recv(in, (r + n - 1) % n, {.tag = 5}, async_op);
    } else {
      b = pg.recv(in, (r + n - 1) % n, {.tag = 5}, async_op);
      a = pg.send(out, (r + 1) % n, {.tag = 5}, async_op);
    }
    a.wait();
    b.wait();
    EXPECT_EQ(values(in), (std::vector<float>(1000, float((r + n - 1) % n))));
  });
}

TEST(ProcessGroup, ArgumentErrorsAreThrownByTheCall) {
  run_ranks(2, [](ProcessGroup& pg) {
    Tensor t = Tensor::zeros({2, 3}).transpose(0, 1);
    try {
      pg.all_reduce(t);
      ADD_FAILURE() << "non-contiguous tensor accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "all_reduce")) << e.what();
      EXPECT_TRUE(contains(e.what(), "contiguous")) << e.what();
    }
    EXPECT_THROW(pg.broadcast(Tensor::zeros({2}), {.root = 2}), InvalidArgument);
    EXPECT_THROW(pg.all_gather(std::vector<Tensor>{Tensor::zeros({2})}, Tensor::zeros({2})),
                 InvalidArgument);
    std::vector<Tensor> wrong_dtype{Tensor::zeros({2}), Tensor::zeros({2}, kFloat64)};
    EXPECT_THROW(pg.all_gather(wrong_dtype, Tensor::zeros({2})), InvalidArgument);
    EXPECT_THROW(pg.all_gather_into_tensor(Tensor::zeros({3}), Tensor::zeros({2})),
                 InvalidArgument);
    EXPECT_THROW(pg.send(Tensor::zeros({1}), pg.rank()), InvalidArgument);
    float buf[8] = {};
    EXPECT_THROW(pg.all_gather(buf, buf + 1, 2, DataType::kFloat32), InvalidArgument);
    EXPECT_THROW(pg.all_reduce(nullptr, 3, DataType::kFloat32), InvalidArgument);
    // No op was issued by the failed calls: the ranks still agree.
    pg.barrier();
  });
}

TEST(ProcessGroup, AsyncOpsRunInIssueOrder) {
  run_ranks(3, [](ProcessGroup& pg) {
    // broadcast, sum, avg on one buffer, ten times: only issue order gives 7 * 3^10.
    std::vector<int32_t> buf(100, pg.rank() == 0 ? 7 : -1);
    std::vector<Work> works;
    for (int i = 0; i < 10; ++i) {
      works.push_back(
          pg.broadcast(buf.data(), buf.size(), DataType::kInt32, {.root = 0}, async_op));
      works.push_back(pg.all_reduce(buf.data(), buf.size(), DataType::kInt32, {}, async_op));
      works.push_back(pg.all_reduce(buf.data(), buf.size(), DataType::kInt32,
                                    {.op = ReduceOp::kAvg}, async_op));
    }
    works.back().wait();
    for (auto& w : works) EXPECT_TRUE(w.is_success());
    for (size_t i = 0; i + 1 < works.size(); ++i)
      EXPECT_LT(works[i].sequence(), works[i + 1].sequence());
    EXPECT_EQ(buf, std::vector<int32_t>(100, 7 * 59049));
  });
}

// PyTorch's default: without async_op a call returns only once the op
// completed, which needs every rank; the late rank marks its arrival first.
TEST(ProcessGroup, OpsBlockUnlessAsyncOpIsAskedFor) {
  std::atomic<bool> late_rank_arrived{false};
  run_ranks(2, [&](ProcessGroup& pg) {
    if (pg.rank() == 1) {
      std::this_thread::sleep_for(300ms);
      late_rank_arrived = true;
    }
    pg.barrier();
    EXPECT_TRUE(late_rank_arrived) << "barrier returned before rank 1 joined it";
    pg.barrier();
    if (pg.rank() == 1) late_rank_arrived = false;
    pg.barrier();
    // An async op returns at once; its Work completes when the late rank comes.
    if (pg.rank() == 0) {
      std::vector<float> v(4, 1.0f);
      Work w = pg.all_reduce(v.data(), v.size(), DataType::kFloat32, {}, async_op);
      EXPECT_FALSE(late_rank_arrived);
      w.wait();
      EXPECT_TRUE(late_rank_arrived);
      EXPECT_EQ(v, std::vector<float>(4, 2.0f));
    } else {
      std::this_thread::sleep_for(300ms);
      late_rank_arrived = true;
      std::vector<float> v(4, 1.0f);
      pg.all_reduce(v.data(), v.size(), DataType::kFloat32);
      EXPECT_EQ(v, std::vector<float>(4, 2.0f));  // the result is there on return
    }
  });
}

TEST(ProcessGroup, BlockingOpsQueueBehindAsyncOnesAndThrowDirectly) {
  run_ranks(3, [](ProcessGroup& pg) {
    std::vector<int32_t> buf(5000, pg.rank() == 1 ? 3 : 0);
    // async broadcast, then a blocking all_reduce of the same buffer: the
    // blocking one must wait for the broadcast (issue order), then sum.
    Work b = pg.broadcast(buf.data(), buf.size(), DataType::kInt32, {.root = 1}, async_op);
    pg.all_reduce(buf.data(), buf.size(), DataType::kInt32);
    EXPECT_TRUE(b.is_completed());
    EXPECT_EQ(buf, std::vector<int32_t>(5000, 9));
    // A blocking op's failure is thrown by the call itself.
    size_t count = pg.rank() == 0 ? 4 : 5;
    EXPECT_THROW(pg.all_reduce(buf.data(), count, DataType::kInt32), Error);
  });
}

TEST(ProcessGroup, WorkIssuedOnOneThreadIsWaitedOnAnother) {
  run_ranks(2, [](ProcessGroup& pg) {
    std::vector<std::vector<float>> bufs(200, std::vector<float>(64, 1.0f));
    std::vector<Work> works(bufs.size());
    std::atomic<size_t> issued{0};
    std::thread waiter([&] {
      for (size_t i = 0; i < works.size(); ++i) {
        while (issued.load() <= i) std::this_thread::yield();
        works[i].wait();  // may run the op on this thread
      }
    });
    for (size_t i = 0; i < bufs.size(); ++i) {
      works[i] = pg.all_reduce(bufs[i].data(), 64, DataType::kFloat32, {}, async_op);
      issued.store(i + 1);
    }
    waiter.join();
    for (auto& b : bufs) EXPECT_EQ(b, std::vector<float>(64, 2.0f));
  });
}

TEST(ProcessGroup, ThenRunsOnceTheOpCompletedInOrderAndAtOnceWhenDone) {
  run_ranks(2, [](ProcessGroup& pg) {
    std::vector<float> buf(1000, 1.0f);
    Work w = pg.all_reduce(buf.data(), buf.size(), DataType::kFloat32, {}, async_op);
    std::mutex mu;
    std::vector<std::string> seen;
    std::latch ran(2);
    for (const char* name : {"first", "second"}) {
      w.then([&, name] {
        std::lock_guard<std::mutex> lk(mu);
        // The op's result is visible to its callbacks.
        seen.push_back(std::string(name) + (buf[0] == 2.0f && w.is_success() ? "" : " early"));
        ran.count_down();
      });
    }
    ran.wait();  // the group's thread (or a waiter) completes the op unprompted
    w.wait();
    {
      std::lock_guard<std::mutex> lk(mu);
      EXPECT_EQ(seen, (std::vector<std::string>{"first", "second"}));
    }
    // Added after completion: runs here and now.
    bool now = false;
    w.then([&] { now = true; });
    EXPECT_TRUE(now);
  });
}

TEST(ProcessGroup, ThenSeesTheFailureOfAFailedOp) {
  run_ranks(2, [](ProcessGroup& pg) {
    std::vector<float> buf(20, 1.0f);
    Work w = pg.all_reduce(buf.data(), pg.rank() == 0 ? 10 : 11, DataType::kFloat32, {},
                           async_op);
    std::latch ran(1);
    std::exception_ptr got;
    w.then([&] {
      got = w.exception();
      ran.count_down();
    });
    ran.wait();
    EXPECT_NE(got, nullptr);
    EXPECT_THROW(w.wait(), Error);
  });
}

TEST(ProcessGroup, MismatchFailsThroughWorkNamingBothSides) {
  run_ranks(2, [](ProcessGroup& pg) {
    std::vector<float> buf(20, 1.0f);
    size_t count = pg.rank() == 0 ? 10 : 11;
    Work w = pg.all_reduce(buf.data(), count, DataType::kFloat32, {}, async_op);
    try {
      w.wait();
      ADD_FAILURE() << "mismatch not detected";
    } catch (const InvalidArgument& e) {
      std::string m = e.what();
      EXPECT_TRUE(contains(m, "all_reduce")) << m;
      EXPECT_TRUE(contains(m, "group 'test'")) << m;
      EXPECT_TRUE(contains(m, "10") && contains(m, "11")) << m;
    } catch (const Error& e) {
      // The rank that learns of the mismatch second may see the peer's abort.
      EXPECT_TRUE(contains(e.what(), "all_reduce")) << e.what();
    }
    EXPECT_FALSE(w.is_success());
    EXPECT_NE(w.exception(), nullptr);
    // Later ops fail at once with the group's first error.
    EXPECT_THROW(pg.barrier(), Error);
    EXPECT_EQ(buf, std::vector<float>(20, 1.0f));  // no byte written
  });
}

TEST(ProcessGroup, OpTimeoutNamesOpGroupSequenceAndMissingRank) {
  std::latch done(1);
  run_ranks(2, [&](ProcessGroup& pg) {
    pg.barrier();  // seq 0
    if (pg.rank() == 1) {
      done.wait();  // never joins the second barrier
      return;
    }
    Work w = pg.barrier({.timeout = 200ms}, async_op);
    try {
      w.wait();
      ADD_FAILURE() << "barrier did not time out";
    } catch (const TimeoutError& e) {
      std::string m = e.what();
      EXPECT_TRUE(contains(m, "barrier")) << m;
      EXPECT_TRUE(contains(m, "'test'")) << m;
      EXPECT_TRUE(contains(m, "seq 1")) << m;
      EXPECT_TRUE(contains(m, "1")) << m;
    }
    done.count_down();
  });
}

TEST(ProcessGroup, NewGroupMakesSubgroupsOfMembersOnly) {
  run_ranks(4, [](ProcessGroup& pg) {
    auto odd = pg.new_group({3, 1});
    auto all = pg.new_group({});
    ASSERT_NE(all, nullptr);
    EXPECT_EQ(all->size(), 4);
    if (pg.rank() % 2 == 0) {
      EXPECT_EQ(odd, nullptr);
    } else {
      ASSERT_NE(odd, nullptr);
      EXPECT_EQ(odd->size(), 2);
      EXPECT_EQ(odd->rank(), pg.rank() / 2);
      EXPECT_EQ(odd->world_ranks(), (std::vector<int>{1, 3}));
      EXPECT_EQ(odd->name(), "test/0");
      int64_t v = pg.rank();
      odd->all_reduce(&v, 1, DataType::kInt64);
      EXPECT_EQ(v, 4);
      // A subgroup of a subgroup.
      auto last = odd->new_group({1});
      ASSERT_EQ(last == nullptr, pg.rank() == 1);
      if (last) {
        EXPECT_EQ(last->world_ranks(), (std::vector<int>{3}));
        last->all_reduce(&v, 1, DataType::kInt64);
        EXPECT_EQ(v, 4);
      }
    }
    int32_t x = 1;
    all->all_reduce(&x, 1, DataType::kInt32);
    EXPECT_EQ(x, 4);
    // The parent still works after its children were made and used.
    pg.all_reduce(&x, 1, DataType::kInt32);
    EXPECT_EQ(x, 16);
    EXPECT_THROW(pg.new_group({0, 0}), InvalidArgument);
    EXPECT_THROW(pg.new_group({4}), InvalidArgument);
  });
}

TEST(ProcessGroup, DestroyWithPendingOpsFailsThemInsteadOfHanging) {
  run_ranks(
      2,
      [](ProcessGroup& pg) {
        pg.barrier();
        if (pg.rank() == 0) {
          // Rank 1 never joins this barrier; destroy must not wait out the timeout.
          Work w = pg.barrier({}, async_op);
          pg.destroy();
          EXPECT_TRUE(w.is_completed());
          EXPECT_THROW(w.wait(), Error);
          EXPECT_THROW(pg.barrier(), Error);
        } else {
          // Rank 1's next op learns that rank 0 gave up.
          EXPECT_THROW(pg.all_reduce(nullptr, 0, DataType::kFloat32), Error);
        }
      },
      std::chrono::seconds(120));
}

TEST(ProcessGroup, NcclNeedsItsBuildAndADevice) {
  EXPECT_THROW(parse_backend("gloo"), InvalidArgument);
  EXPECT_EQ(parse_backend("MPI"), BackendKind::kMpi);
  EXPECT_EQ(backend_name(BackendKind::kNative), "native");
  EXPECT_TRUE(backend_available(BackendKind::kNative));
  const DeviceRuntime* cuda = find_device_runtime(DeviceType::kCUDA);
  if (backend_available(BackendKind::kNccl) && cuda != nullptr &&
      const_cast<DeviceRuntime*>(cuda)->device_count() > 0)
    GTEST_SKIP() << "this machine has a GPU: nccl groups are tested by cohort_nccl_tests";
  try {
    ProcessGroup::create(BackendKind::kNccl, std::make_shared<rendezvous::HashStore>(), 0, 1);
    FAIL() << "nccl group created";
  } catch (const NotSupported& e) {
    // Without NCCL in the build, or without a CUDA device to run it on.
    EXPECT_TRUE(contains(e.what(), "nccl backend")) << e.what();
    if (backend_available(BackendKind::kNccl)) EXPECT_TRUE(contains(e.what(), "cuda")) << e.what();
  }
  // Before the env:// bootstrap (no RANK here): nothing waits for other ranks.
  EXPECT_THROW(init_process_group("nccl"), NotSupported);
}

TEST(ProcessGroup, FileInitMethodWithOneRank) {
  std::string path = "/tmp/cohort-pg-test-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  auto pg = init_process_group("native", "file://" + path, 1, 0, std::chrono::seconds(30));
  EXPECT_EQ(get_rank(*pg), 0);
  EXPECT_EQ(get_world_size(*pg), 1);
  Tensor t = Tensor::full({3}, 2.0);
  pg->all_reduce(t);
  EXPECT_EQ(values(t), (std::vector<float>(3, 2.0f)));
  destroy_process_group(pg);
  EXPECT_EQ(pg, nullptr);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace cohort::distributed
