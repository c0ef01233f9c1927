// Registration (once, as PyTorch 1.13), what a hook sees of a bucket, and
// the compression hooks' bytes and accuracy.
#include <gtest/gtest.h>

#include <string>

#include "cohort/parallel/comm_hooks/allreduce_hook.h"
#include "cohort/parallel/comm_hooks/comm_hooks_testing.h"
#include "cohort/parallel/comm_hooks/compression_hooks.h"
#include "cohort/parallel/comm_hooks/powersgd_hook.h"

namespace cohort::parallel {
namespace {

using testing::mlp;
using testing::on_ranks;
using testing::train;
using testing::TrainResult;

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(CommHookRegistration, SecondRegistrationIsAnError) {
  distributed::testing::run_ranks_named(
      "once", 1, [](std::shared_ptr<distributed::ProcessGroup> pg) {
        DistributedDataParallel ddp(mlp(4, 4, 2), pg);
        // After training started is fine (PyTorch 1.13 checks only "once").
        mse_loss(ddp.forward(Tensor::ones({2, 4})), Tensor::zeros({2, 2})).backward();
        ddp.register_comm_hook(powersgd_hook({.start_powerSGD_iter = 2}));
        const std::string second = error_of([&] { ddp.register_comm_hook(allreduce_hook()); });
        EXPECT_NE(second.find("can only be called once"), std::string::npos) << second;
        EXPECT_NE(second.find("powersgd:1"), std::string::npos) << second;
        EXPECT_EQ(ddp.reducer().comm_hook().name(), "powersgd:1");

        DistributedDataParallel given(mlp(4, 4, 2), pg, {.comm_hook = fp16_compress_hook()});
        EXPECT_NE(error_of([&] {
                    given.register_comm_hook(allreduce_hook());
                  }).find("only be called once"),
                  std::string::npos);
        DistributedDataParallel bf16(mlp(4, 4, 2), pg, {.reduce_dtype = DType::kBFloat16});
        EXPECT_NE(error_of([&] {
                    bf16.register_comm_hook(allreduce_hook());
                  }).find("only be called once"),
                  std::string::npos);
        EXPECT_NE(error_of([&] {
                    DistributedDataParallel both(
                        mlp(4, 4, 2), pg,
                        {.reduce_dtype = DType::kBFloat16,
                         .comm_hook = powersgd_hook({.start_powerSGD_iter = 2})});
                  }).find("give one"),
                  std::string::npos);
        DistributedDataParallel fresh(mlp(4, 4, 2), pg);
        EXPECT_THROW(fresh.register_comm_hook(nullptr), InvalidArgument);
        fresh.register_comm_hook(bf16_compress_hook());  // the null one did not count
      });
}

struct SeenBucket {
  size_t index = 0;
  bool is_last = false;
  int64_t numel = 0;
  std::vector<std::string> names;
  std::vector<int64_t> offsets;
  bool views_ok = true;
};

TEST(CommHook, SeesTheBucketsMetadata) {
  distributed::testing::run_ranks_named(
      "meta", 2, [](std::shared_ptr<distributed::ProcessGroup> pg) {
        auto model = mlp(8, 32, 8);
        std::vector<SeenBucket> seen;
        auto spy = make_comm_hook(
            "spy", allreduce_hook(),
            [&](CommHookPtr& inner, distributed::ProcessGroup& g, GradBucket& b) {
              SeenBucket s{b.index, b.is_last, b.buffer.numel(), {}, {}, true};
              for (const GradBucketParam& p : b.params) {
                s.names.push_back(p.name);
                s.offsets.push_back(p.offset);
                // The gradient is the parameter's .grad, a view of the buffer at
                // its offset.
                s.views_ok = s.views_ok && p.gradient.is_same(p.parameter.grad()) &&
                             p.gradient.storage() == b.buffer.storage() &&
                             p.gradient.sizes() == p.parameter.sizes() &&
                             p.gradient.data_ptr<float>() == b.buffer.data_ptr<float>() + p.offset;
              }
              seen.push_back(s);
              EXPECT_EQ(b.gradients().size(), b.params.size());
              EXPECT_EQ(b.parameters().size(), b.params.size());
              return inner->run(g, b);
            });
        DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0.001, .comm_hook = spy});
        auto [x, y] = testing::regression_batch(8, 8, 0, pg->rank());
        mse_loss(ddp.forward(x), y).backward();
        const auto names = ddp.reducer().bucket_parameter_names();
        ASSERT_GE(names.size(), 2U);
        ASSERT_EQ(seen.size(), names.size());
        for (size_t i = 0; i < seen.size(); ++i) {
          EXPECT_EQ(seen[i].index, i);
          EXPECT_EQ(seen[i].is_last, i + 1 == seen.size());
          EXPECT_EQ(seen[i].numel, ddp.reducer().bucket_buffer(i).numel());
          EXPECT_EQ(seen[i].names, names[i]);
          EXPECT_EQ(seen[i].offsets.front(), 0);
          EXPECT_TRUE(seen[i].views_ok) << "bucket " << i;
        }
      });
}

void expect_close(const TrainResult& a, const TrainResult& b, double atol) {
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    EXPECT_TRUE(allclose(a.parameters[i].second, b.parameters[i].second, 0, atol))
        << a.parameters[i].first;
    EXPECT_FALSE(equal(a.parameters[i].second, b.parameters[i].second))
        << a.parameters[i].first << ": compression changed nothing";
  }
}

TEST(CompressionHooks, Fp16AndBf16HalveTheBytesAndStayClose) {
  auto run = [](CommHookPtr hook) {
    return on_ranks(2, [&](auto pg) { return train(pg, hook, 4); })[0];
  };
  const TrainResult full = run(nullptr), fp16 = run(fp16_compress_hook()),
                    bf16 = run(bf16_compress_hook());
  size_t grad_bytes = 0;
  for (const auto& [name, t] : full.parameters) grad_bytes += t.nbytes();
  for (size_t s = 0; s < full.step_bytes.size(); ++s) {
    EXPECT_EQ(full.step_bytes[s], grad_bytes);
    EXPECT_EQ(fp16.step_bytes[s] * 2, full.step_bytes[s]);
    EXPECT_EQ(bf16.step_bytes[s] * 2, full.step_bytes[s]);
  }
  expect_close(full, fp16, 1e-3);
  expect_close(full, bf16, 1e-2);
  EXPECT_THROW(grad_reduce_hook(DType::kFloat64), InvalidArgument);
  EXPECT_THROW(CompressionHook(DType::kFloat32), InvalidArgument);
}

}  // namespace
}  // namespace cohort::parallel
