// CUDA torch::Tensors through the adapter, on a GPU (binary
// cohort_libtorch_cuda_tests, ctest label cuda): every collective at 2 ranks,
// blocking and async, on cuda:0 (both ranks share the one GPU: the native
// backend), on this build's path (cuda_tensors.h; zero copy with a LibTorch
// that has c10::Stream::native_handle, 2.11) and on host staging; an all_reduce ordered after work
// queued on a LibTorch side stream; DistributedDataParallel on a small CUDA model equal to one
// process over 20 steps on both paths; and ZeRO stage 2 likewise. Ranks are processes
// (cohort::spawn): autograd runs CUDA backward on one device thread per GPU, which two ranks on
// threads would share, and a process may not use CUDA after forking; so this parent never touches
// CUDA, and asks a child whether LibTorch sees a GPU. Without one every test
// skips, saying why.
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

#include "cohort/base/error.h"
#include "cohort/launch/spawn.h"
#include "cohort/libtorch/cuda_tensors.h"
#include "cohort/libtorch/distributed_data_parallel.h"
#include "cohort/libtorch/process_group.h"
#include "cohort/libtorch/zero_redundancy_optimizer.h"

namespace cohort::libtorch {
namespace {

using namespace std::chrono_literals;

// Why LibTorch has no GPU here ("" when it has one), found without
// initialising CUDA in this process.
std::string no_gpu_reason() {
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA))
    return fmt::format("this LibTorch ({}) was built without CUDA", TORCH_VERSION);
  try {
    spawn(
        [](int) {
          if (!torch::cuda::is_available())
            throw Error("torch::cuda::is_available() is false (no GPU or no driver)");
        },
        1, SpawnOptions{.pin = false, .timeout = 120s, .grace = 5s, .extra_env = {}});
  } catch (const SpawnError& e) {
    return e.what();
  }
  return "";
}

#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    if (std::string why = no_gpu_reason(); !why.empty())            \
      GTEST_SKIP() << "needs a GPU that LibTorch can use: " << why; \
  } while (0)

SpawnOptions ranks_options() {
  return SpawnOptions{.pin = false, .timeout = 240s, .grace = 5s, .extra_env = {}};
}

void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  if (!got.is_cuda()) throw Error(what + ": the result left the GPU");
  if (!torch::equal(got.cpu(), want.cpu())) {
    std::ostringstream s;
    s << what << ": got " << got.cpu() << " want " << want.cpu();
    throw Error(s.str());
  }
}

const at::Device kGpu(at::kCUDA, 0);

// Rank r's tensor of n elements on the GPU: r*100 + 0..n-1.
at::Tensor ramp(int r, int64_t n, at::ScalarType dtype = at::kFloat) {
  return (torch::arange(n, at::kDouble) + 100.0 * r).to(dtype).to(kGpu);
}

// Every collective through `pg`, on `pg.cuda_tensor_path()`.
void collectives(int rank, const ProcessGroup& pg) {
  const int n = pg.size();
  const int64_t k = 4;
  std::printf("rank %d: the %s path\n", rank,
              std::string(cuda_tensor_path_name(pg.cuda_tensor_path())).c_str());
  for (bool async : {false, true}) {
    auto run = [&](auto&& blocking, auto&& asynchronous) {
      if (!async) return blocking();
      Work w = asynchronous();
      w.wait();
      if (!w.is_completed() || !w.is_success()) throw Error("async op did not complete");
    };
    const std::string mode = std::string(async ? " (async" : " (blocking") + ", " +
                             std::string(cuda_tensor_path_name(pg.cuda_tensor_path())) + ")";
    for (auto dtype : {at::kFloat, at::kDouble, at::kLong, at::kHalf, at::kBFloat16}) {
      at::Tensor t = torch::full({k}, rank + 1, at::TensorOptions(dtype).device(kGpu));
      run([&] { pg.all_reduce(t); }, [&] { return pg.all_reduce(t, {}, async_op); });
      expect_equal(t, torch::full({k}, n * (n + 1) / 2, dtype),
                   "all_reduce " + std::string(c10::toString(dtype)) + mode);
    }
    at::Tensor b = ramp(rank, k);
    run([&] { pg.broadcast(b, {.root = n - 1}); },
        [&] { return pg.broadcast(b, {.root = n - 1}, async_op); });
    expect_equal(b, ramp(n - 1, k), "broadcast" + mode);
    at::Tensor r = torch::ones({k}, at::TensorOptions(at::kLong).device(kGpu));
    run([&] { pg.reduce(r, {.root = 0}); }, [&] { return pg.reduce(r, {.root = 0}, async_op); });
    if (rank == 0) expect_equal(r, torch::full({k}, n, at::kLong), "reduce" + mode);
    std::vector<at::Tensor> outs;
    for (int i = 0; i < n; ++i) outs.push_back(torch::zeros({2, 2}, kGpu));
    at::Tensor in = ramp(rank, k).view({2, 2});
    run([&] { pg.all_gather(outs, in); }, [&] { return pg.all_gather(outs, in, {}, async_op); });
    for (int i = 0; i < n; ++i) expect_equal(outs[i], ramp(i, k).view({2, 2}), "all_gather" + mode);
    at::Tensor flat = torch::zeros({n * k}, kGpu);
    run([&] { pg.all_gather_into_tensor(flat, ramp(rank, k)); },
        [&] { return pg.all_gather_into_tensor(flat, ramp(rank, k), {}, async_op); });
    for (int i = 0; i < n; ++i)
      expect_equal(flat.narrow(0, i * k, k), ramp(i, k), "all_gather_into_tensor" + mode);
    std::vector<at::Tensor> g;
    if (rank == 1)
      for (int i = 0; i < n; ++i) g.push_back(torch::zeros({k}, kGpu));
    run([&] { pg.gather(g, ramp(rank, k), {.root = 1}); },
        [&] { return pg.gather(g, ramp(rank, k), {.root = 1}, async_op); });
    if (rank == 1)
      for (int i = 0; i < n; ++i) expect_equal(g[i], ramp(i, k), "gather" + mode);
    std::vector<at::Tensor> s;
    if (rank == 0)
      for (int i = 0; i < n; ++i) s.push_back(ramp(i, k, at::kInt));
    at::Tensor so = torch::zeros({k}, at::TensorOptions(at::kInt).device(kGpu));
    run([&] { pg.scatter(so, s); }, [&] { return pg.scatter(so, s, {}, async_op); });
    expect_equal(so, ramp(rank, k, at::kInt), "scatter" + mode);
    std::vector<at::Tensor> rs_in;
    for (int i = 0; i < n; ++i) rs_in.push_back(ramp(rank, k) + 1000.0 * i);
    at::Tensor want = torch::zeros({k}, kGpu);
    for (int j = 0; j < n; ++j) want += ramp(j, k) + 1000.0 * rank;
    at::Tensor rs_out = torch::zeros({k}, kGpu);
    run([&] { pg.reduce_scatter(rs_out, rs_in); },
        [&] { return pg.reduce_scatter(rs_out, rs_in, {}, async_op); });
    expect_equal(rs_out, want, "reduce_scatter" + mode);
    rs_out.zero_();
    at::Tensor rs_flat = torch::cat(rs_in);
    run([&] { pg.reduce_scatter_tensor(rs_out, rs_flat); },
        [&] { return pg.reduce_scatter_tensor(rs_out, rs_flat, {}, async_op); });
    expect_equal(rs_out, want, "reduce_scatter_tensor" + mode);
    std::vector<at::Tensor> a_in, a_out;
    for (int i = 0; i < n; ++i) {
      a_in.push_back(ramp(rank * 10 + i, 2));
      a_out.push_back(torch::zeros({2}, kGpu));
    }
    run([&] { pg.all_to_all(a_out, a_in); },
        [&] { return pg.all_to_all(a_out, a_in, {}, async_op); });
    for (int j = 0; j < n; ++j) expect_equal(a_out[j], ramp(j * 10 + rank, 2), "all_to_all" + mode);
    at::Tensor single = torch::zeros({2 * n}, kGpu);
    run([&] { pg.all_to_all_single(single, torch::cat(a_in)); },
        [&] { return pg.all_to_all_single(single, torch::cat(a_in), {}, async_op); });
    expect_equal(single, torch::cat(a_out), "all_to_all_single" + mode);
    at::Tensor got = torch::zeros({k}, kGpu);
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    Work sw = pg.send(ramp(rank, k), next, {}, async_op);
    Work rw = pg.recv(got, prev, {}, async_op);
    sw.wait();
    rw.wait();
    expect_equal(got, ramp(prev, k), "send/recv" + mode);
  }
}

// This process's path (zero copy with a LibTorch that names its streams and
// cohort's CUDA layer), then host staging through the same group.
TEST(LibTorchCuda, EveryCollectiveOnCudaTensorsAtTwoRanksOnBothPaths) {
  SKIP_WITHOUT_GPU();
  spawn(
      [](int rank) {
        auto pg = init_process_group("native", "env://", -1, -1, 60s);
        std::printf("rank %d: %s\n", rank, cuda_tensor_path().reason.c_str());
        collectives(rank, pg);
        collectives(rank, pg.with_cuda_tensor_path(CudaTensorPath::kHostStaging));
        auto world = pg.group();
        distributed::destroy_process_group(world);
      },
      2, ranks_options());
}

// Work queued on a LibTorch side stream before the op (a fill of a large
// tensor) is seen by the op, and the result is there for the next work on
// that stream: the op is ordered on LibTorch's current stream.
void on_side_stream(int rank) {
  auto pg = init_process_group("native", "env://", -1, -1, 60s);
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const c10::Stream side = impl->getStreamFromGlobalPool(c10::Device(c10::DeviceType::CUDA, 0));
  at::Tensor t = torch::zeros({1 << 22}, kGpu);
  at::Tensor sum;
  {
    c10::StreamGuard guard(side);
    t.fill_(rank + 1);
    Work w = pg.all_reduce(t, {}, async_op);
    w.wait();
    sum = t.sum();  // on the side stream, after the wait
  }
  const double want = 3.0 * (1 << 22);
  if (sum.item<double>() != want)
    throw Error(fmt::format("rank {}: sum {} after all_reduce on a side stream, want {}", rank,
                            sum.item<double>(), want));
  auto world = pg.group();
  distributed::destroy_process_group(world);
}

TEST(LibTorchCuda, AllReduceIsOrderedOnLibTorchsCurrentStream) {
  SKIP_WITHOUT_GPU();
  spawn(on_side_stream, 2, ranks_options());
}

constexpr int64_t kGlobalBatch = 32;

std::shared_ptr<torch::nn::SequentialImpl> make_mlp(int seed) {
  torch::manual_seed(seed);
  auto m = std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(12, 32), torch::nn::ReLU(),
                                                       torch::nn::Linear(32, 4));
  m->to(kGpu);
  return m;
}

std::pair<at::Tensor, at::Tensor> batch_of(int step) {
  torch::manual_seed(500 + step);
  return {torch::randn({kGlobalBatch, 12}).to(kGpu), torch::randn({kGlobalBatch, 4}).to(kGpu)};
}

void expect_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                  const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (!got[i].is_cuda()) throw Error(what + ": a parameter left the GPU");
    if (!torch::allclose(got[i], want[i], 1e-4, 1e-5))
      throw Error(fmt::format("{}: parameter {} differs from one process by {}", what, i,
                              (got[i] - want[i]).abs().max().item<double>()));
  }
}

// One process on the whole batch: the reference.
std::vector<at::Tensor> one_process(int steps) {
  auto ref = make_mlp(3);
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    torch::mse_loss(ref->forward(x), y).backward();
    opt.step();
  }
  return ref->parameters();
}

void ddp_vs_one_process(int rank, CudaTensorPath path) {
  auto world = init_process_group("native", "env://", -1, -1, 60s);
  ProcessGroup pg = path == cuda_tensor_path().path ? world : world.with_cuda_tensor_path(path);
  const int64_t local = kGlobalBatch / pg.size();
  auto model = make_mlp(rank == 0 ? 3 : 77);  // DDP broadcasts rank 0's
  DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0.001});
  if (ddp.num_buckets() < 2) throw Error("expected several buckets");
  if (!ddp.bucket_buffer(0).is_cuda()) throw Error("a bucket of CUDA parameters is not on the GPU");
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const int steps = 20;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    auto out = ddp.forward(x.narrow(0, rank * local, local));
    torch::mse_loss(out, y.narrow(0, rank * local, local)).backward();
    opt.step();
  }
  expect_close(model->parameters(), one_process(steps),
               fmt::format("DDP rank {} ({})", rank, cuda_tensor_path_name(path)));
  auto g = world.group();
  distributed::destroy_process_group(g);
}

TEST(LibTorchCuda, DdpOnACudaModelEqualsOneProcessOverTwentyStepsOnBothPaths) {
  SKIP_WITHOUT_GPU();
  spawn([](int rank) { ddp_vs_one_process(rank, cuda_tensor_path().path); }, 2, ranks_options());
  spawn([](int rank) { ddp_vs_one_process(rank, CudaTensorPath::kHostStaging); }, 2,
        ranks_options());
}

void zero_vs_one_process(int rank, bool overlap) {
  auto pg = init_process_group("native", "env://", -1, -1, 60s);
  const int64_t local = kGlobalBatch / pg.size();
  auto model = make_mlp(3);
  ZeroRedundancyOptimizer opt(model->parameters(), pg,
                              [](std::vector<at::Tensor> p) {
                                return std::make_unique<torch::optim::SGD>(
                                    p, torch::optim::SGDOptions(0.05).momentum(0.9));
                              },
                              {.stage = 2, .overlap_with_backward = overlap});
  const int steps = 20;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    auto out = model->forward(x.narrow(0, rank * local, local));
    torch::mse_loss(out, y.narrow(0, rank * local, local)).backward();
    opt.step();
  }
  expect_close(model->parameters(), one_process(steps),
               fmt::format("ZeRO stage 2 (overlap {}) rank {}", overlap, rank));
  auto world = pg.group();
  distributed::destroy_process_group(world);
}

TEST(LibTorchCuda, ZeroStageTwoOnACudaModelEqualsOneProcessOverTwentySteps) {
  SKIP_WITHOUT_GPU();
  spawn([](int rank) { zero_vs_one_process(rank, false); }, 2, ranks_options());
  spawn([](int rank) { zero_vs_one_process(rank, true); }, 2, ranks_options());
}

}  // namespace
}  // namespace cohort::libtorch
