// ZeRO's communication hooks (FSDP's register_comm_hook), real processes: the
// built-in reduce_scatter hook trains exactly as the built-in reduction at
// stages 1, 2 and 3; fp16 and bf16 compression halve the reduce_scatter
// bytes and stay within 16-bit precision of it; a hook of one's own with
// state and a second stage sees every unit once per step, in the same order
// on every rank, the last one marked; what FSDP refuses is refused, naming
// why.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/zero/sharded_optimizer.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<distributed::ProcessGroup> group() {
  return distributed::init_process_group("native", "env://", -1, -1, 60s);
}

nn::ModulePtr make_model() {
  Generator gen(7);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(10, 16, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(16, 9, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(9, 3, gen)});
}

struct Trained {
  nn::NamedTensors params;
  uint64_t reduce_scatter_bytes = 0;
};

Trained train(const std::shared_ptr<distributed::ProcessGroup>& pg, int stage,
              const ShardedCommHookPtr& hook, int steps = 4) {
  auto model = make_model();
  ShardedDataParallel zero(model, pg, {.stage = stage});
  if (hook) zero.register_comm_hook(hook);
  ShardedOptimizer opt(zero,
                       std::make_unique<optim::SGD>(zero.shard_parameters(),
                                                    optim::SGDOptions{.lr = 0.1, .momentum = 0.9}));
  for (int s = 0; s < steps; ++s) {
    Generator g(500 + 10 * static_cast<uint64_t>(pg->rank()) + static_cast<uint64_t>(s));
    Tensor x = randn({5, 10}, g), y = randn({5, 3}, g);
    opt.zero_grad();
    mse_loss(zero.forward(x), y).backward();
    opt.step();
  }
  zero.summon_full_params();
  Trained t{{}, zero.traffic().reduce_scatter_bytes};
  for (const auto& [name, p] : model->named_parameters()) t.params.emplace_back(name, p.clone());
  return t;
}

double max_difference(const Trained& a, const Trained& b) {
  double d = 0;
  for (size_t i = 0; i < a.params.size(); ++i)
    d = std::max(d, static_cast<double>(
                        max(abs(sub(a.params[i].second, b.params[i].second))).item<float>()));
  return d;
}

TEST(ZeroCommHook, ReduceScatterHookTrainsExactlyAsTheBuiltInReduction) {
  spawn(
      [](int rank) {
        auto pg = group();
        for (int stage : {1, 2, 3}) {
          Trained plain = train(pg, stage, nullptr);
          Trained hooked = train(pg, stage, zero_reduce_scatter_hook());
          if (max_difference(plain, hooked) != 0)
            throw Error(fmt::format("rank {} stage {}: differs by {}", rank, stage,
                                    max_difference(plain, hooked)));
          if (plain.reduce_scatter_bytes != hooked.reduce_scatter_bytes)
            throw Error(fmt::format("rank {} stage {}: {} bytes, not {}", rank, stage,
                                    hooked.reduce_scatter_bytes, plain.reduce_scatter_bytes));
        }
        distributed::destroy_process_group(pg);
      },
      3);
}

TEST(ZeroCommHook, CompressionHooksHalveTheBytesWithinSixteenBitPrecision) {
  spawn(
      [](int rank) {
        auto pg = group();
        for (int stage : {1, 3}) {
          Trained plain = train(pg, stage, nullptr);
          for (const ShardedCommHookPtr& hook :
               {zero_fp16_compress_hook(), zero_bf16_compress_hook()}) {
            Trained t = train(pg, stage, hook);
            if (2 * t.reduce_scatter_bytes != plain.reduce_scatter_bytes)
              throw Error(fmt::format("rank {} stage {} {}: {} bytes against {}", rank, stage,
                                      hook->name(), t.reduce_scatter_bytes,
                                      plain.reduce_scatter_bytes));
            const double d = max_difference(plain, t);
            // About 3 significant digits of gradients of order 0.1, 4 steps at lr 0.1.
            if (d > 2e-3 || d == 0)
              throw Error(fmt::format("rank {} stage {} {}: parameters differ by {}", rank, stage,
                                      hook->name(), d));
          }
        }
        distributed::destroy_process_group(pg);
      },
      2);
}

// A hook of one's own: a sum reduce_scatter, then an all_reduce of the
// number of ranks that the finish divides by; its state records the calls.
struct Calls {
  std::vector<size_t> indices;
  std::vector<bool> last;
};

TEST(ZeroCommHook, HookWithStateAndTwoStagesSeesEveryUnitInOrder) {
  spawn(
      [](int rank) {
        auto pg = group();
        auto calls = std::make_shared<Calls>();
        auto hook = make_sharded_comm_hook(
            "sum_then_count", calls,
            [](std::shared_ptr<Calls>& state, distributed::ProcessGroup& pg, ShardedGradBucket& b) {
              state->indices.push_back(b.index);
              state->last.push_back(b.is_last);
              Tensor out = b.output;
              distributed::Work w = pg.reduce_scatter_tensor(
                  out, b.input, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
              return BucketFuture{
                  BucketReduction{std::move(w), {}, b.input.nbytes()}, [&pg, out]() mutable {
                    Tensor n = Tensor::ones({1});
                    distributed::Work c = pg.all_reduce(n, {.op = distributed::ReduceOp::kSum},
                                                        distributed::async_op);
                    return BucketReduction{std::move(c),
                                           [out, n]() mutable { out.mul_(1.0 / n.item<float>()); },
                                           n.nbytes()};
                  }};
            });
        for (int stage : {2, 3}) {
          calls->indices.clear();
          calls->last.clear();
          Trained plain = train(pg, stage, nullptr, 3);
          Trained t = train(pg, stage, hook, 3);
          if (max_difference(plain, t) > 1e-6)
            throw Error(fmt::format("rank {} stage {}: differs by {}", rank, stage,
                                    max_difference(plain, t)));
          // Three linear units (the Tanh units hold no parameter), three steps.
          const std::vector<size_t> want = {0, 1, 2, 0, 1, 2, 0, 1, 2};
          if (calls->indices != want)
            throw Error(fmt::format("rank {} stage {}: units {}", rank, stage,
                                    fmt::join(calls->indices, ",")));
          for (size_t i = 0; i < want.size(); ++i)
            if (calls->last[i] != (want[i] == 2))
              throw Error(fmt::format("rank {}: is_last wrong at call {}", rank, i));
        }
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(ZeroCommHook, RefusesWhatFsdpRefuses) {
  spawn(
      [](int rank) {
        auto pg = group();
        auto expect_refused = [&](const std::function<void()>& f, const std::string& want) {
          try {
            f();
          } catch (const Error& e) {
            if (std::string(e.what()).find(want) != std::string::npos) return;
            throw Error(fmt::format("rank {}: wrong message: {}", rank, e.what()));
          }
          throw Error(fmt::format("rank {}: accepted, expected '{}'", rank, want));
        };
        ShardedDataParallel z(make_model(), pg, {.stage = 2});
        z.register_comm_hook(zero_fp16_compress_hook());
        expect_refused([&] { z.register_comm_hook(zero_bf16_compress_hook()); },
                       "can only be called once");
        ShardedDataParallel late(make_model(), pg, {.stage = 3});
        late.forward(Tensor::zeros({2, 10}));
        expect_refused([&] { late.register_comm_hook(zero_fp16_compress_hook()); },
                       "before the first forward");
        ShardedDataParallel bf(make_model(), pg, {.stage = 1, .reduce_dtype = DType::kBFloat16});
        expect_refused([&] { bf.register_comm_hook(zero_fp16_compress_hook()); },
                       "reduce_dtype bfloat16 already says");
        distributed::destroy_process_group(pg);
      },
      2);
  spawn(
      [](int rank) {
        auto pg = group();
        ShardedDataParallel h(make_model(), pg, {.stage = 3, .hybrid_shard_size = 2});
        try {
          h.register_comm_hook(zero_fp16_compress_hook());
        } catch (const InvalidArgument& e) {
          if (std::string(e.what()).find("not supported under hybrid sharding") !=
              std::string::npos) {
            distributed::destroy_process_group(pg);
            return;
          }
          throw;
        }
        throw Error(fmt::format("rank {}: a hook under HSDP was accepted", rank));
      },
      4);
}

}  // namespace
}  // namespace cohort::parallel
