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

// all_to_all_v on raw buffers: rank r sends (r + 2j) % 3 elements to rank j
// (zeros included), each naming sender, receiver and position.
std::vector<size_t> v_counts(int n, int from, int to) {
  std::vector<size_t> c;
  for (int k = 0; k < n; ++k) {
    const int f = from < 0 ? k : from, t = to < 0 ? k : to;
    c.push_back(static_cast<size_t>((f + 2 * t) % 3));
  }
  return c;
}

std::vector<int64_t> v_block_values(int n, int from, int to) {
  std::vector<int64_t> v;
  for (int k = 0; k < n; ++k) {
    const int f = from < 0 ? k : from, t = to < 0 ? k : to;
    for (int e = 0; e < (f + 2 * t) % 3; ++e) v.push_back(f * 100 + t * 10 + e);
  }
  return v;
}

TEST(ProcessGroup, AllToAllVUnevenCountsBlockingAndAsync) {
  for (int n : {2, 3, 4}) {
    run_ranks(n, [n](ProcessGroup& pg) {
      const int r = pg.rank();
      const std::vector<int64_t> send = v_block_values(n, r, -1);
      const std::vector<int64_t> want = v_block_values(n, -1, r);
      std::vector<int64_t> recv(want.size(), -1);
      pg.all_to_all_v(send.data(), v_counts(n, r, -1), recv.data(), v_counts(n, -1, r),
                      DataType::kInt64);
      EXPECT_EQ(recv, want);
      // Async, queued behind another op, with the count arrays gone before
      // it runs: the Work holds its own copy.
      std::vector<int64_t> recv2(want.size(), -1);
      std::vector<int32_t> x(1000, 1);
      Work first = pg.all_reduce(x.data(), x.size(), DataType::kInt32, {}, async_op);
      Work w;
      {
        std::vector<size_t> sc = v_counts(n, r, -1), rc = v_counts(n, -1, r);
        w = pg.all_to_all_v(send.data(), sc, recv2.data(), rc, DataType::kInt64, {}, async_op);
        std::fill(sc.begin(), sc.end(), 1000);
        std::fill(rc.begin(), rc.end(), 1000);
      }
      w.wait();
      first.wait();
      EXPECT_EQ(recv2, want);
      EXPECT_EQ(x, std::vector<int32_t>(1000, n));
    });
  }
}

TEST(ProcessGroup, AllToAllVArgumentAndCountErrors) {
  run_ranks(3, [](ProcessGroup& pg) {
    int64_t send[8] = {}, recv[8] = {};
    const std::vector<size_t> two(2, 1), three(3, 1);
    try {
      pg.all_to_all_v(send, two, recv, three, DataType::kInt64);
      ADD_FAILURE() << "two counts accepted in a group of three";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(),
                           "all_to_all_v: send_counts and recv_counts must hold 3 "
                           "counts (one per rank of group 'test'), got 2 and 3"))
          << e.what();
    }
    // The rejected call issued nothing; now a pair that disagrees fails the
    // op on both its ranks (a mismatch, not a hang), naming both sides; rank
    // 1 agrees with both and may get through, but hears of it at the barrier.
    std::vector<size_t> sc = three, rc = three;
    if (pg.rank() == 2) sc[0] = 2;
    try {
      pg.all_to_all_v(send, sc, recv, rc, DataType::kInt64);
      pg.barrier();
      ADD_FAILURE() << "mismatched counts accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(),
                           "rank 2 sends 2 elements to rank 0 (its send_counts[0]), "
                           "but rank 0 expects 1 from rank 2 (its recv_counts[2])"))
          << e.what();
    }
  });
}

TEST(ProcessGroup, AllToAllSingleWithSplitSizes) {
  run_ranks(3, [](ProcessGroup& pg) {
    const int n = pg.size(), r = pg.rank();
    // Rows of two: rank r sends (r + 2j) % 3 rows to rank j (zeros included).
    std::vector<int64_t> in_splits, out_splits;
    std::vector<float> in, want;
    for (int j = 0; j < n; ++j) {
      in_splits.push_back((r + 2 * j) % 3);
      out_splits.push_back((j + 2 * r) % 3);
      for (int e = 0; e < 2 * ((r + 2 * j) % 3); ++e) in.push_back(100.0f * r + 10.0f * j + e);
      for (int e = 0; e < 2 * ((j + 2 * r) % 3); ++e) want.push_back(100.0f * j + 10.0f * r + e);
    }
    const auto rows = [](const std::vector<float>& v) {
      return static_cast<int64_t>(v.size() / 2);
    };
    Tensor input = Tensor::from_vector<float>(in, {rows(in), 2});
    Tensor output = Tensor::zeros({rows(want), 2});
    pg.all_to_all_single(output, input, out_splits, in_splits);
    EXPECT_EQ(values(output), want);
    Tensor again = Tensor::zeros({rows(want), 2});
    Work w = pg.all_to_all_single(again, input, out_splits, in_splits, {}, async_op);
    w.wait();
    EXPECT_EQ(values(again), want);
    // Empty split sizes: equal splits, as the plain form.
    Tensor eq_in = Tensor::full({3, 2}, static_cast<double>(r)), eq_out = Tensor::zeros({3, 2});
    pg.all_to_all_single(eq_out, eq_in, {}, std::span<const int64_t>{});
    EXPECT_EQ(values(eq_out), (std::vector<float>{0, 0, 1, 1, 2, 2}));
    // Refused by the call (nothing issued): sizes that do not sum to size(0).
    const std::vector<int64_t> bad{1, 1, 2};
    try {
      pg.all_to_all_single(output, input, out_splits, bad);
      ADD_FAILURE() << "split sizes of the wrong sum accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(),
                           "all_to_all_single: input_split_sizes sum to 4 rows, but "
                           "input has 3 (its size(0))"))
          << e.what();
    }
    pg.barrier();
  });
}

TEST(ProcessGroup, BitwiseReductionsAndBool) {
  run_ranks(3, [](ProcessGroup& pg) {
    const int64_t bit = int64_t{1} << (pg.rank() + 3);
    std::vector<int64_t> v{bit | 1, bit | 1, bit | 1};
    pg.all_reduce(v.data(), 1, DataType::kInt64, {.op = ReduceOp::kBor});
    pg.all_reduce(v.data() + 1, 1, DataType::kInt64, {.op = ReduceOp::kBand});
    pg.all_reduce(v.data() + 2, 1, DataType::kInt64, {.op = ReduceOp::kBxor});
    EXPECT_EQ(v, (std::vector<int64_t>{8 | 16 | 32 | 1, 1, 8 | 16 | 32 | 1}));
    // bool: sum is a logical or, product a logical and; results stay 0/1.
    std::vector<uint8_t> b{static_cast<uint8_t>(pg.rank() != 1), 1, 0};
    std::vector<uint8_t> p = b;
    pg.all_reduce(b.data(), b.size(), DataType::kBool);
    pg.all_reduce(p.data(), p.size(), DataType::kBool, {.op = ReduceOp::kProduct});
    EXPECT_EQ(b, (std::vector<uint8_t>{1, 1, 0}));
    EXPECT_EQ(p, (std::vector<uint8_t>{0, 1, 0}));
    // Refused by the call itself on every rank: the group still works.
    float f[2] = {1, 2};
    try {
      pg.all_reduce(f, 2, DataType::kFloat32, {.op = ReduceOp::kBxor});
      ADD_FAILURE() << "bxor on float32 accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(),
                           "all_reduce: reduction 'bxor' needs an integer or bool "
                           "dtype, got float32"))
          << e.what();
    }
    EXPECT_THROW(pg.reduce_scatter(b.data(), p.data(), 1, DataType::kBool, {.op = ReduceOp::kAvg}),
                 InvalidArgument);
    std::vector<int8_t> c{static_cast<int8_t>(-1 - pg.rank())};
    pg.all_reduce(c.data(), 1, DataType::kInt8, {.op = ReduceOp::kMin});
    EXPECT_EQ(c[0], -3);
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
    Work w = pg.all_reduce(buf.data(), pg.rank() == 0 ? 10 : 11, DataType::kFloat32, {}, async_op);
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
