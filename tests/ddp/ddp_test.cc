// DistributedDataParallel with real processes (cohort::spawn), checked against
// single-process training on the same samples: W ranks x batch 64/W give the
// parameters that one process with batch 64 reaches after 20 SGD steps
// (float32 tolerance), also with no_sync gradient accumulation, with 4 ranks
// and small buckets, with find_unused_parameters, and with the bf16
// compression hook (close, not equal). Each rank compares its own parameters
// with a reference it computes itself; a mismatch throws, which spawn reports
// as the failed rank.
#include <gtest/gtest.h>

#include <cmath>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/cpu.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/comm_hooks/allreduce_hook.h"
#include "cohort/parallel/comm_hooks/compression_hooks.h"
#include "cohort/parallel/distributed_data_parallel.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kGlobalBatch = 64;

std::shared_ptr<distributed::ProcessGroup> join() {
  return distributed::init_process_group("native", "env://", -1, -1, 60s);
}

// The samples of step `step` (the same on every rank): x [64,1,28,28], y [64].
std::pair<Tensor, Tensor> batch_of(int step) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  return {rand({kGlobalBatch, 1, 28, 28}, gen), randint(0, 10, {kGlobalBatch}, gen)};
}

// Rank 0's initial model; other ranks start from different weights, which DDP
// must overwrite with rank 0's.
std::shared_ptr<nn::Net> make_net(int rank) {
  Generator gen(rank == 0 ? 42 : 4242 + static_cast<uint64_t>(rank));
  return std::make_shared<nn::Net>(gen);
}

optim::SGD make_sgd(std::vector<Tensor> params) {
  return optim::SGD(std::move(params), {.lr = 0.01, .momentum = 0.9});
}

// One process, batch 64, `steps` steps: the reference.
nn::NamedTensors train_reference(int steps) {
  auto model = make_net(0);
  auto opt = make_sgd(model->parameters());
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    nll_loss(model->forward(x), y).backward();
    opt.step();
  }
  return model->named_parameters();
}

void check_params(const nn::NamedTensors& got, const nn::NamedTensors& want, double rtol,
                  double atol, int rank, const std::string& what) {
  COHORT_ASSERT(got.size() == want.size(), "parameter count");
  for (size_t i = 0; i < got.size(); ++i) {
    if (!allclose(got[i].second, want[i].second, rtol, atol)) {
      std::vector<float> a = got[i].second.to_vector<float>();
      std::vector<float> b = want[i].second.to_vector<float>();
      double worst = 0;
      for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, double(std::fabs(a[k] - b[k])));
      throw Error(
          fmt::format("rank {}: {}: parameter {} differs from the reference (max |diff| {})", rank,
                      what, got[i].first, worst));
    }
  }
}

// Two copies of rank 0's Net, `a` under DDP with float32 options, `b` with
// the bf16 ones, after one backward of this rank's 32 rows of batch 0.
struct Bf16Pair {
  Bf16Pair(int rank, const std::shared_ptr<distributed::ProcessGroup>& pg,
           DistributedDataParallelOptions fp32_options, DistributedDataParallelOptions bf16_options)
      : a(std::make_unique<DistributedDataParallel>(fp32, pg, std::move(fp32_options))),
        b(std::make_unique<DistributedDataParallel>(bf16, pg, std::move(bf16_options))) {
    auto [x, y] = batch_of(0);
    Tensor xl = x.narrow(0, rank * 32, 32), yl = y.narrow(0, rank * 32, 32);
    nll_loss(a->forward(xl), yl).backward();
    nll_loss(b->forward(xl), yl).backward();
  }
  std::shared_ptr<nn::Net> fp32 = make_net(0), bf16 = make_net(0);
  std::unique_ptr<DistributedDataParallel> a, b;
};

// Throws unless every gradient of `bf16` is within bfloat16 rounding of
// `fp32`'s; must_differ: and not bit-identical (the bf16 path was taken).
void check_bf16_close(const nn::Module& fp32, const nn::Module& bf16, const std::string& what,
                      bool must_differ) {
  auto pa = fp32.named_parameters();
  auto pb = bf16.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    Tensor ga = pa[i].second.grad(), gb = pb[i].second.grad();
    // bfloat16 keeps 8 bits of mantissa: relative error about 2^-8 per value.
    double scale = 0;
    for (float v : ga.to_vector<float>()) scale = std::max(scale, double(std::fabs(v)));
    if (!allclose(gb, ga, 2e-2, 2e-2 * scale))
      throw Error(what + " gradient of " + pa[i].first + " is not close to float32's");
    if (must_differ && equal(gb, ga) && ga.numel() > 100)
      throw Error(what + " gradient of " + pa[i].first + " is bit-identical: hook not used?");
  }
}

struct Equivalence {
  int steps = 20;
  double bucket_cap_mb = 25.0;
  int micro_batches = 1;  // > 1: accumulate with no_sync
  bool reference_on_every_rank = true;
};

void run_equivalence(int rank, const Equivalence& e) {
  // DDP and the reference see the same samples in different batch splits.
  // The baseline kernels keep that difference at rounding level (about 1e-8
  // after 20 steps); the Winograd kernels of the avx2/avx512 paths round
  // each op to about 4e-6 (docs/kernels.md), and over 20 SGD steps an
  // occasional ReLU or max-pool flip then moves single weights by 1e-4,
  // which is the kernels' accuracy, not DDP's. Those kernels are checked
  // against the reference and PyTorch per path (conv2d_test, parity.torch).
  KernelPathGuard exact_kernels(KernelPath::kBaseline);
  auto pg = join();
  const int world = pg->size();
  const int64_t local = kGlobalBatch / world;
  auto model = make_net(rank);
  DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = e.bucket_cap_mb});
  auto opt = make_sgd(ddp.parameters());
  for (int s = 0; s < e.steps; ++s) {
    auto [x, y] = batch_of(s);
    Tensor xl = x.narrow(0, rank * local, local);
    Tensor yl = y.narrow(0, rank * local, local);
    opt.zero_grad();
    const int64_t micro = local / e.micro_batches;
    for (int m = 0; m < e.micro_batches; ++m) {
      auto run = [&] {
        Tensor out = ddp.forward(xl.narrow(0, m * micro, micro));
        Tensor loss = nll_loss(out, yl.narrow(0, m * micro, micro));
        mul(loss, 1.0 / e.micro_batches).backward();
      };
      if (m + 1 < e.micro_batches) {
        auto guard = ddp.no_sync();
        run();
      } else {
        run();
      }
    }
    opt.step();
  }
  if (ddp.reducer().num_reductions() != e.steps)
    throw Error(fmt::format("rank {}: {} reductions for {} steps", rank,
                            ddp.reducer().num_reductions(), e.steps));
  if (rank == 0 || e.reference_on_every_rank) {
    check_params(model->named_parameters(), train_reference(e.steps), 1e-3, 1e-4, rank,
                 fmt::format("{} ranks, {} micro-batches, bucket {} MiB", world, e.micro_batches,
                             e.bucket_cap_mb));
  }
  distributed::destroy_process_group(pg);
}

TEST(DDP, TwoRanksMatchOneProcessOnTheWholeBatch) {
  spawn([](int rank) { run_equivalence(rank, {}); }, 2);
}

TEST(DDP, NoSyncAccumulationMatchesOneProcess) {
  spawn([](int rank) { run_equivalence(rank, {.micro_batches = 2}); }, 2);
}

TEST(DDP, FourRanksWithSmallBucketsMatchOneProcess) {
  // 0.05 MiB buckets split Net into several; 10 steps keep 4 ranks on 2 cores quick.
  spawn(
      [](int rank) {
        run_equivalence(rank,
                        {.steps = 10, .bucket_cap_mb = 0.05, .reference_on_every_rank = false});
      },
      4);
}

TEST(DDP, BucketsFollowReverseRegistrationOrder) {
  spawn(
      [](int rank) {
        auto pg = join();
        DistributedDataParallel ddp(make_net(rank), pg, {.bucket_cap_mb = 0.05});
        auto names = ddp.reducer().bucket_parameter_names();
        // fc1.weight (400 KB) is bigger than the cap: a bucket of its own.
        std::vector<std::vector<std::string>> want = {
            {"fc2.bias", "fc2.weight", "fc1.bias"},
            {"fc1.weight"},
            {"conv2.bias", "conv2.weight", "conv1.bias", "conv1.weight"}};
        if (names != want) throw Error("unexpected bucket assignment");
        // No .grad before the first backward, as PyTorch's; then every .grad
        // is a view into its bucket.
        for (const Tensor& p : ddp.parameters())
          if (p.grad().defined()) throw Error("a parameter has a .grad before any backward");
        auto [x, y] = batch_of(0);
        nll_loss(ddp.forward(x.narrow(0, rank * 32, 32)), y.narrow(0, rank * 32, 32)).backward();
        auto params = ddp.module().named_parameters();
        for (size_t b = 0; b < names.size(); ++b)
          for (const auto& n : names[b])
            for (const auto& [name, p] : params)
              if (name == n && p.grad().storage() != ddp.reducer().bucket_buffer(b).storage())
                throw Error("grad of " + n + " is not a view into bucket " + std::to_string(b));
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDP, BucketsLaunchDuringBackward) {
  spawn(
      [](int rank) {
        auto pg = join();
        auto model = make_net(rank);
        // When the first bucket (fc2, fc1.bias) is launched, conv1's gradient
        // -- the last one backward computes -- must not exist yet.
        std::vector<bool> conv1_done_at_launch;
        CommHookPtr spy = make_comm_hook(
            "spy", allreduce_hook(),
            [&](CommHookPtr& inner, distributed::ProcessGroup& g, GradBucket& b) {
              Tensor conv1_grad = model->conv1().weight().grad();
              conv1_done_at_launch.push_back(sum(abs(conv1_grad)).item<double>() != 0.0);
              return inner->run(g, b);
            });
        DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0.05, .comm_hook = spy});
        auto [x, y] = batch_of(0);
        ddp.zero_grad();
        nll_loss(ddp.forward(x.narrow(0, rank * 32, 32)), y.narrow(0, rank * 32, 32)).backward();
        if (conv1_done_at_launch != std::vector<bool>{false, false, true})
          throw Error("buckets were not launched while backward was still running");
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDP, BuffersComeFromRankZeroEveryForward) {
  spawn(
      [](int rank) {
        auto pg = join();
        Generator gen(8);
        auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
            std::make_shared<nn::Linear>(4, 4, gen), std::make_shared<nn::BatchNorm1d>(4)});
        auto ref = model->clone();
        DistributedDataParallel ddp(model, pg);
        auto data_of = [](int r) {
          Generator g(100 + static_cast<uint64_t>(r));
          return mul(randn({6, 4}, g), 1.0 + r);
        };
        ddp.forward(data_of(rank));  // each rank updates its statistics with its own data
        model->eval();
        ddp.forward(data_of(rank));  // starts by broadcasting rank 0's; eval changes nothing
        ref->forward(data_of(0));    // rank 0's statistics after its training forward
        auto got = model->named_buffers();
        auto want = ref->named_buffers();
        for (size_t i = 0; i < got.size(); ++i)
          if (!allclose(got[i].second, want[i].second, 1e-5, 1e-6))
            throw Error(fmt::format("rank {}: buffer {} is not rank 0's", rank, got[i].first));
        distributed::destroy_process_group(pg);
      },
      2);
}

// Two heads; `use_b` decides per rank whether head b takes part.
class TwoHeads : public nn::Cloneable<TwoHeads> {
 public:
  explicit TwoHeads(Generator& gen) : Cloneable("TwoHeads") {
    register_module("a", std::make_shared<nn::Linear>(6, 3, gen));
    register_module("b", std::make_shared<nn::Linear>(3, 3, gen));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = child<nn::Linear>(0).forward(x);
    return use_b ? child<nn::Linear>(1).forward(relu(h)) : h;
  }
  bool use_b = true;
};

TEST(DDP, FindUnusedParametersAveragesZerosForUnusedOnes) {
  spawn(
      [](int rank) {
        auto pg = join();
        Generator gen(5);
        auto model = std::make_shared<TwoHeads>(gen);
        auto ref = model->clone_as<TwoHeads>();
        DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
        auto opt = make_sgd(ddp.parameters());
        auto opt_ref = make_sgd(ref->parameters());
        for (int s = 0; s < 5; ++s) {
          Generator dg(77 + static_cast<uint64_t>(s));
          Tensor x = randn({8, 6}, dg);
          Tensor y = randn({8, 3}, dg);
          // Rank 1 skips head b on even steps.
          auto uses_b = [&](int r) { return !(r == 1 && s % 2 == 0); };
          model->use_b = uses_b(rank);
          opt.zero_grad();
          mse_loss(ddp.forward(x.narrow(0, rank * 4, 4)), y.narrow(0, rank * 4, 4)).backward();
          opt.step();
          // Reference: the average of both ranks' losses in one process.
          opt_ref.zero_grad();
          Tensor total;
          for (int r = 0; r < 2; ++r) {
            ref->use_b = uses_b(r);
            Tensor l = mse_loss(ref->forward(x.narrow(0, r * 4, 4)), y.narrow(0, r * 4, 4));
            total = total.defined() ? add(total, l) : l;
          }
          mul(total, 0.5).backward();
          opt_ref.step();
        }
        check_params(model->named_parameters(), ref->named_parameters(), 1e-4, 1e-5, rank,
                     "find_unused_parameters");
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDP, Bf16HookIsCloseToFloat32) {
  spawn(
      [](int rank) {
        auto pg = join();
        Bf16Pair p(rank, pg, {}, {.comm_hook = bf16_compress_hook()});
        check_bf16_close(*p.fp32, *p.bf16, "bf16", /*must_differ=*/true);
        distributed::destroy_process_group(pg);
      },
      2);
}

// --grad-reduce bf16 (reduce_dtype): the hooks hand the collectives half the
// bytes of float32's (the whole model's gradients, one step), and the
// gradients stay within bf16 rounding of float32's.
TEST(DDP, Bf16GradReduceHalvesTheBytesReduced) {
  spawn(
      [](int rank) {
        auto pg = join();
        Bf16Pair p(rank, pg, {.bucket_cap_mb = 0.05},
                   {.bucket_cap_mb = 0.05, .reduce_dtype = DType::kBFloat16});
        size_t grad_bytes = 0;
        for (const Tensor& t : p.fp32->parameters()) grad_bytes += t.nbytes();
        const Reducer& a = p.a->reducer();
        const size_t full = a.reduced_bytes(), half = p.b->reducer().reduced_bytes();
        if (a.num_buckets() < 2 || full != grad_bytes || half * 2 != full)
          throw Error(
              fmt::format("rank {}: {} buckets reduced {} bytes in float32 and {} in bf16 "
                          "for {} bytes of gradients",
                          rank, a.num_buckets(), full, half, grad_bytes));
        check_bf16_close(*p.fp32, *p.bf16, "bf16-reduced", /*must_differ=*/false);
        distributed::destroy_process_group(pg);
      },
      2);
  EXPECT_THROW(grad_reduce_hook(DType::kFloat64), InvalidArgument);
}

}  // namespace
}  // namespace cohort::parallel
