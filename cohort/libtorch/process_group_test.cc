// cohort's collectives on LibTorch tensors: every op, blocking and async, at
// 2 and 3 ranks (cohort::spawn, env://), on every mapped dtype, in place on
// the tensors' memory; argument errors naming the op, the argument and what
// is expected, thrown on a one-rank group.
#include "cohort/libtorch/process_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include "cohort/base/error.h"
#include "cohort/launch/spawn.h"

namespace cohort::libtorch {
namespace {

using namespace std::chrono_literals;

void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  if (!torch::equal(got, want)) {
    std::ostringstream s;
    s << what << ": got " << got << " want " << want;
    throw Error(s.str());
  }
}

// Rank r's tensor of n elements: r*100 + 0..n-1.
at::Tensor ramp(int r, int64_t n, at::ScalarType dtype = at::kFloat) {
  return (torch::arange(n, at::kDouble) + 100.0 * r).to(dtype);
}

void run_all_ops(int rank) {
  torch::set_num_threads(1);
  auto pg = init_process_group("native", "env://", -1, -1, 60s);
  const int n = pg.size();
  const int64_t k = 4;
  for (bool async : {false, true}) {
    auto run = [&](auto&& blocking, auto&& asynchronous) {
      if (async) {
        Work w = asynchronous();
        w.wait();
        if (!w.is_completed() || !w.is_success()) throw Error("async op did not complete");
      } else {
        blocking();
      }
    };
    const std::string mode = async ? " (async)" : "";
    // all_reduce over every dtype, in place (a slice of a bigger tensor too).
    for (auto dtype : {at::kFloat, at::kDouble, at::kInt, at::kLong, at::kByte, at::kHalf,
                       at::kBFloat16, at::kChar}) {
      at::Tensor big = torch::zeros({3, k}, dtype);
      at::Tensor t = big[1];
      t.copy_(torch::full({k}, rank + 1, dtype));
      run([&] { pg.all_reduce(t); }, [&] { return pg.all_reduce(t, {}, async_op); });
      expect_equal(big[1], torch::full({k}, n * (n + 1) / 2, dtype),
                   "all_reduce " + std::string(c10::toString(dtype)) + mode);
      expect_equal(big[0], torch::zeros({k}, dtype), "all_reduce wrote outside its slice");
    }
    at::Tensor avg = torch::full({k}, 2.0 * rank);
    run([&] { pg.all_reduce(avg, {.op = ReduceOp::kAvg}); },
        [&] { return pg.all_reduce(avg, {.op = ReduceOp::kAvg}, async_op); });
    expect_equal(avg, torch::full({k}, double(n - 1)), "all_reduce avg" + mode);
    // Bool as gloo's: sum is a logical or, product a logical and.
    at::Tensor any = torch::full({k}, rank == 0, at::kBool), all = any.clone();
    run([&] { pg.all_reduce(any); }, [&] { return pg.all_reduce(any, {}, async_op); });
    run([&] { pg.all_reduce(all, {.op = ReduceOp::kProduct}); },
        [&] { return pg.all_reduce(all, {.op = ReduceOp::kProduct}, async_op); });
    expect_equal(any, torch::ones({k}, at::kBool), "all_reduce bool sum" + mode);
    expect_equal(all, torch::full({k}, n == 1, at::kBool), "all_reduce bool product" + mode);
    at::Tensor bits = torch::full({k}, int64_t{1} << rank, at::kLong);
    run([&] { pg.all_reduce(bits, {.op = ReduceOp::kBor}); },
        [&] { return pg.all_reduce(bits, {.op = ReduceOp::kBor}, async_op); });
    expect_equal(bits, torch::full({k}, (int64_t{1} << n) - 1, at::kLong), "all_reduce bor" + mode);
    // broadcast from the last rank.
    at::Tensor b = ramp(rank, k);
    run([&] { pg.broadcast(b, {.root = n - 1}); },
        [&] { return pg.broadcast(b, {.root = n - 1}, async_op); });
    expect_equal(b, ramp(n - 1, k), "broadcast" + mode);
    // reduce to rank 0.
    at::Tensor r = torch::ones({k}, at::kLong);
    run([&] { pg.reduce(r, {.op = ReduceOp::kSum, .root = 0}); },
        [&] { return pg.reduce(r, {.op = ReduceOp::kSum, .root = 0}, async_op); });
    if (rank == 0) expect_equal(r, torch::full({k}, n, at::kLong), "reduce" + mode);
    // all_gather (list) and all_gather_into_tensor.
    std::vector<at::Tensor> outs;
    for (int i = 0; i < n; ++i) outs.push_back(torch::zeros({2, 2}));
    at::Tensor in = ramp(rank, k).view({2, 2});
    run([&] { pg.all_gather(outs, in); }, [&] { return pg.all_gather(outs, in, {}, async_op); });
    for (int i = 0; i < n; ++i) expect_equal(outs[i], ramp(i, k).view({2, 2}), "all_gather" + mode);
    at::Tensor flat = torch::zeros({n * k});
    run([&] { pg.all_gather_into_tensor(flat, ramp(rank, k)); },
        [&] { return pg.all_gather_into_tensor(flat, ramp(rank, k), {}, async_op); });
    for (int i = 0; i < n; ++i)
      expect_equal(flat.narrow(0, i * k, k), ramp(i, k), "all_gather_into_tensor" + mode);
    // gather to rank 1, scatter from rank 0.
    std::vector<at::Tensor> g;
    if (rank == 1)
      for (int i = 0; i < n; ++i) g.push_back(torch::zeros({k}, at::kDouble));
    run([&] { pg.gather(g, ramp(rank, k, at::kDouble), {.root = 1}); },
        [&] { return pg.gather(g, ramp(rank, k, at::kDouble), {.root = 1}, async_op); });
    if (rank == 1)
      for (int i = 0; i < n; ++i) expect_equal(g[i], ramp(i, k, at::kDouble), "gather" + mode);
    std::vector<at::Tensor> s;
    if (rank == 0)
      for (int i = 0; i < n; ++i) s.push_back(ramp(i, k, at::kInt));
    at::Tensor so = torch::zeros({k}, at::kInt);
    run([&] { pg.scatter(so, s); }, [&] { return pg.scatter(so, s, {}, async_op); });
    expect_equal(so, ramp(rank, k, at::kInt), "scatter" + mode);
    // reduce_scatter (list) and reduce_scatter_tensor: rank r gets sum_j (j*100 + r-th ramp).
    std::vector<at::Tensor> rs_in;
    for (int i = 0; i < n; ++i) rs_in.push_back(ramp(rank, k) + 1000.0 * i);
    at::Tensor rs_out = torch::zeros({k});
    at::Tensor want = torch::zeros({k});
    for (int j = 0; j < n; ++j) want += ramp(j, k) + 1000.0 * rank;
    run([&] { pg.reduce_scatter(rs_out, rs_in); },
        [&] { return pg.reduce_scatter(rs_out, rs_in, {}, async_op); });
    expect_equal(rs_out, want, "reduce_scatter" + mode);
    at::Tensor rs_flat = torch::cat(rs_in);
    rs_out.zero_();
    run([&] { pg.reduce_scatter_tensor(rs_out, rs_flat); },
        [&] { return pg.reduce_scatter_tensor(rs_out, rs_flat, {}, async_op); });
    expect_equal(rs_out, want, "reduce_scatter_tensor" + mode);
    // all_to_all (list) and all_to_all_single: outputs[j] = rank j's inputs[rank].
    std::vector<at::Tensor> a_in, a_out;
    for (int i = 0; i < n; ++i) {
      a_in.push_back(ramp(rank * 10 + i, 2));
      a_out.push_back(torch::zeros({2}));
    }
    run([&] { pg.all_to_all(a_out, a_in); },
        [&] { return pg.all_to_all(a_out, a_in, {}, async_op); });
    for (int j = 0; j < n; ++j) expect_equal(a_out[j], ramp(j * 10 + rank, 2), "all_to_all" + mode);
    at::Tensor a_single = torch::zeros({2 * n});
    run([&] { pg.all_to_all_single(a_single, torch::cat(a_in)); },
        [&] { return pg.all_to_all_single(a_single, torch::cat(a_in), {}, async_op); });
    expect_equal(a_single, torch::cat(a_out), "all_to_all_single" + mode);
    // send/recv around a ring, then a barrier.
    at::Tensor to_send = ramp(rank, k);
    at::Tensor got = torch::zeros({k});
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    if (async) {
      Work sw = pg.send(to_send, next, {}, async_op);
      Work rw = pg.recv(got, prev, {}, async_op);
      sw.wait();
      rw.wait();
    } else if (rank % 2 == 0) {
      pg.send(to_send, next);
      pg.recv(got, prev);
    } else {
      pg.recv(got, prev);
      pg.send(to_send, next);
    }
    expect_equal(got, ramp(prev, k), "send/recv" + mode);
    run([&] { pg.barrier(); }, [&] { return pg.barrier({}, async_op); });
  }
  // An async op whose Work and tensor are dropped at once still completes
  // before the memory goes (the last Work waits for it).
  { Work w = pg.all_reduce(torch::ones({1 << 16}), {}, async_op); }
  pg.barrier();
  auto world = pg.group();
  distributed::destroy_process_group(world);
}

TEST(LibTorchProcessGroup, EveryOpBlockingAndAsyncAtTwoRanks) { spawn(run_all_ops, 2); }

TEST(LibTorchProcessGroup, EveryOpBlockingAndAsyncAtThreeRanks) { spawn(run_all_ops, 3); }

// A one-rank group for the argument checks (they throw before any communication).
ProcessGroup solo() {
  std::string path = "/tmp/cohort-libtorch-solo-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  auto pg = init_process_group("native", "file://" + path, 1, 0, 10s);
  ::unlink(path.c_str());
  return pg;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument thrown)";
}

TEST(LibTorchProcessGroup, ArgumentErrorsNameTheOpTheArgumentAndTheFix) {
  ProcessGroup pg = solo();
  using ::testing::HasSubstr;
  at::Tensor strided = torch::zeros({4, 4}).t();
  std::string m = error_of([&] { pg.all_reduce(strided); });
  EXPECT_THAT(m, HasSubstr("all_reduce: argument 'tensor' is not contiguous"));
  EXPECT_THAT(m, HasSubstr("strides [1, 4]"));
  EXPECT_THAT(m, HasSubstr(".contiguous()"));
  // A device other than the CPU (meta stands for CUDA, which this build lacks).
  m = error_of([&] { pg.broadcast(torch::empty({4}, at::Device(at::kMeta))); });
  EXPECT_THAT(m, HasSubstr("broadcast: argument 'tensor' is on device meta"));
  EXPECT_THAT(m, HasSubstr("CPU tensors"));
  m = error_of([&] { pg.all_reduce(torch::zeros({4}, at::kShort)); });
  EXPECT_THAT(m, HasSubstr("all_reduce: argument 'tensor' has dtype Short"));
  EXPECT_THAT(m, HasSubstr("Float, Double, Half, BFloat16, Int, Long, Byte, Char and Bool"));
  m = error_of([&] { pg.all_reduce(torch::zeros({4}, at::kComplexFloat)); });
  EXPECT_THAT(m, HasSubstr("dtype ComplexFloat"));
  m = error_of([&] { pg.all_reduce(at::Tensor()); });
  EXPECT_THAT(m, HasSubstr("all_reduce: argument 'tensor' is an undefined tensor"));
  m = error_of([&] { pg.all_gather_into_tensor(torch::zeros({3}), torch::zeros({4})); });
  EXPECT_THAT(m, HasSubstr("all_gather_into_tensor: argument 'output' has 3 elements, expected 4"));
  m = error_of(
      [&] { pg.all_gather_into_tensor(torch::zeros({4}, at::kDouble), torch::zeros({4})); });
  EXPECT_THAT(m, HasSubstr("argument 'output' has dtype float64, expected float32"));
  m = error_of([&] { pg.all_gather({torch::zeros({4}), torch::zeros({4})}, torch::zeros({4})); });
  EXPECT_THAT(
      m, HasSubstr("all_gather: argument 'outputs' must hold 1 tensors (one per rank), got 2"));
  m = error_of([&] { pg.reduce_scatter(torch::zeros({4}), {torch::zeros({5})}); });
  EXPECT_THAT(m, HasSubstr("reduce_scatter: argument 'inputs[0]' has 5 elements, expected 4"));
  m = error_of([&] { pg.all_reduce(torch::zeros({4}).to_sparse()); });
  EXPECT_THAT(m, HasSubstr("layout"));
  // The group still works after rejected calls.
  at::Tensor t = torch::ones({2});
  pg.all_reduce(t);
  EXPECT_TRUE(torch::equal(t, torch::ones({2})));
  EXPECT_EQ(to_data_type(at::kHalf), DataType::kFloat16);
  EXPECT_EQ(to_data_type(at::kBFloat16), DataType::kBFloat16);
  EXPECT_EQ(to_data_type(at::kByte), DataType::kUInt8);
  EXPECT_EQ(to_data_type(at::kChar), DataType::kInt8);
  EXPECT_EQ(to_data_type(at::kBool), DataType::kBool);
}

}  // namespace
}  // namespace cohort::libtorch
