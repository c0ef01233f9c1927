// cohort::libtorch::DistributedDataParallel as PyTorch's DDP defines it, with
// real processes: a parameter no rank used keeps the .grad it had (none
// after its gradients were set to none, so SGD's weight decay leaves it
// alone), with bucket views and with copied gradients; an output left out of
// the loss leaves its parameters without a gradient; ranks with different
// numbers of batches of different sizes train under a Join to one process's
// result (PyTorch's gradient: the sum over the ranks still training divided
// by the initial world size), also with ZeroRedundancyOptimizer after DDP
// (stage 1) and alone (stage 2). Each rank checks itself; a mismatch throws,
// which spawn reports.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/base/error.h"
#include "cohort/launch/spawn.h"
#include "cohort/libtorch/distributed_data_parallel.h"
#include "cohort/libtorch/zero_redundancy_optimizer.h"
#include "cohort/parallel/join.h"

namespace cohort::libtorch {
namespace {

using namespace std::chrono_literals;

ProcessGroup join_group() { return init_process_group("native", "env://", -1, -1, 60s); }

struct TwoLayers : torch::nn::Module {
  TwoLayers()
      : a(register_module("a", torch::nn::Linear(10, 10))),
        b(register_module("b", torch::nn::Linear(10, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto h = a->forward(x);
    return use_b ? b->forward(torch::relu(h)) : h;
  }
  std::vector<torch::Tensor> forward_both(const torch::Tensor& x) {
    return {a->forward(x), b->forward(x)};
  }
  torch::nn::Linear a, b;
  bool use_b = true;
};

std::shared_ptr<TwoLayers> copy_of(const TwoLayers& m) {
  auto c = std::make_shared<TwoLayers>();
  torch::NoGradGuard ng;
  for (size_t i = 0; i < c->parameters().size(); ++i) c->parameters()[i].copy_(m.parameters()[i]);
  return c;
}

void set_grads_to_none(const std::vector<torch::Tensor>& params) {
  for (torch::Tensor p : params) p.mutable_grad() = torch::Tensor();
}

void expect_same(const torch::nn::Module& got, const torch::nn::Module& want, int rank,
                 const std::string& what) {
  auto g = got.named_parameters(), w = want.named_parameters();
  for (size_t i = 0; i < g.size(); ++i) {
    const auto& a = g[i].value();
    const auto& b = w[i].value();
    if (!torch::allclose(a, b, 1e-5, 1e-6))
      throw Error(fmt::format("rank {}: {}: parameter {} differs", rank, what, g[i].key()));
    if (a.grad().defined() != b.grad().defined())
      throw Error(fmt::format("rank {}: {}: {} has {} .grad, the reference {}", rank, what,
                              g[i].key(), a.grad().defined() ? "a" : "no",
                              b.grad().defined() ? "has one" : "has none"));
    if (a.grad().defined() && !torch::allclose(a.grad(), b.grad(), 1e-5, 1e-6))
      throw Error(fmt::format("rank {}: {}: gradient of {} differs", rank, what, g[i].key()));
  }
}

TEST(LibTorchDDPSemantics, UnusedOnEveryRankKeepsNoGradientAndWeightDecaySkipsIt) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = join_group();
        for (bool views : {true, false}) {
          torch::manual_seed(3);
          auto model = std::make_shared<TwoLayers>();
          model->use_b = false;
          auto ref = copy_of(*model);
          ref->use_b = false;
          const torch::Tensor b_before = model->b->weight.detach().clone();
          DistributedDataParallel ddp(
              model, pg, {.find_unused_parameters = true, .gradient_as_bucket_view = views});
          auto o = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.1);
          torch::optim::SGD opt(model->parameters(), o), opt_ref(ref->parameters(), o);
          for (int s = 0; s < 4; ++s) {
            torch::manual_seed(10 + s);
            auto x = torch::randn({4, 10});  // the same rows on every rank
            set_grads_to_none(model->parameters());
            ddp.forward(x).sum().backward();
            opt.step();
            set_grads_to_none(ref->parameters());
            ref->forward(x).sum().backward();
            opt_ref.step();
          }
          expect_same(*model, *ref, rank, views ? "bucket views" : "copied gradients");
          if (!torch::equal(model->b->weight, b_before))
            throw Error(fmt::format("rank {}: the unused b.weight moved", rank));
        }
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

TEST(LibTorchDDPSemantics, OutputLeftOutOfTheLossLeavesItsGradientsAlone) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = join_group();
        torch::manual_seed(6);
        auto model = std::make_shared<TwoLayers>();
        auto ref = copy_of(*model);
        DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
        torch::manual_seed(7);
        auto x = torch::randn({10, 10});
        for (int i = 0; i < 4; ++i) {
          auto out = ddp.forward_with([&] { return model->forward_both(x); });
          auto local = ref->forward_both(x);
          if (i == 0 || i >= 2) {
            out[1].sum().backward();
            local[1].sum().backward();
          } else {
            torch::matmul(out[0], out[1]).sum().backward();
            torch::matmul(local[0], local[1]).sum().backward();
          }
          expect_same(*model, *ref, rank, fmt::format("step {}", i));
        }
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

TEST(LibTorchDDPSemantics, UnevenInputsUnderAJoinMatchOneProcess) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = join_group();
        const std::vector<int> batches = {5, 3};
        torch::manual_seed(21);
        auto model = std::make_shared<TwoLayers>();
        auto ref = copy_of(*model);
        auto data = [](int r, int s) {
          torch::manual_seed(1000 + 100 * r + s);
          return std::pair{torch::randn({3 + r, 10}), torch::randn({3 + r, 10})};
        };
        DistributedDataParallel ddp(model, pg);
        torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
        parallel::run_joined({&ddp}, {}, [&] {
          for (int s = 0; s < batches[static_cast<size_t>(rank)]; ++s) {
            auto [x, y] = data(rank, s);
            opt.zero_grad();
            torch::mse_loss(ddp.forward(x), y).backward();
            opt.step();
          }
        });
        torch::optim::SGD opt_ref(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
        for (int s = 0; s < 5; ++s) {
          opt_ref.zero_grad();
          for (int r = 0; r < 2; ++r) {
            if (s >= batches[static_cast<size_t>(r)]) continue;
            auto [x, y] = data(r, s);
            (torch::mse_loss(ref->forward(x), y) / 2).backward();
          }
          opt_ref.step();
        }
        for (size_t i = 0; i < ref->parameters().size(); ++i)
          if (!torch::allclose(model->parameters()[i], ref->parameters()[i], 1e-5, 1e-6))
            throw Error(fmt::format("rank {}: parameter {} differs from one process's", rank, i));
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

TEST(LibTorchDDPSemantics, IgnoredParametersAreNeitherBroadcastNorReducedAndBadModelsRefused) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = join_group();
        torch::manual_seed(9);
        auto model = std::make_shared<TwoLayers>();
        {
          torch::NoGradGuard ng;
          model->b->weight.fill_(1.0 + rank);  // different per rank: DDP must leave it alone
        }
        DistributedDataParallel ddp(model, pg, {.params_and_buffers_to_ignore = {"b.weight"}});
        if (model->b->weight[0][0].item<float>() != 1.0f + rank)
          throw Error(fmt::format("rank {}: the ignored b.weight was broadcast", rank));
        torch::manual_seed(10 + rank);  // each rank its own rows
        ddp.forward(torch::randn({4, 10})).sum().backward();
        auto names = ddp.bucket_parameter_names();
        for (const auto& bucket : names)
          for (const auto& n : bucket)
            if (n == "b.weight") throw Error(fmt::format("rank {}: b.weight is in a bucket", rank));
        // Its gradient is this rank's own (from this rank's rows).
        at::Tensor g = model->b->weight.grad().clone(), theirs = g.clone();
        pg.broadcast(theirs, {.root = 0});
        if (rank == 1 && torch::equal(g, theirs))
          throw Error("rank 1: the ignored b.weight's gradient was reduced");
        auto refused = [&](const std::function<void()>& f, const std::string& want) {
          try {
            f();
          } catch (const InvalidArgument& e) {
            if (std::string(e.what()).find(want) != std::string::npos) return;
            throw Error(fmt::format("rank {}: wrong message: {}", rank, e.what()));
          }
          throw Error(fmt::format("rank {}: accepted, expected '{}'", rank, want));
        };
        auto frozen = std::make_shared<TwoLayers>();
        for (auto& p : frozen->parameters()) p.set_requires_grad(false);
        refused([&] { DistributedDataParallel d(frozen, pg); },
                "no parameter that requires a gradient");
        refused(
            [&] {
              DistributedDataParallel d(model, pg, {.params_and_buffers_to_ignore = {"c.bias"}});
            },
            "'c.bias'");
        auto grp = pg.group();
        distributed::destroy_process_group(grp);
      },
      2);
}

TEST(LibTorchDDPSemantics, ZeroRedundancyOptimizerUnderAJoinMatchesOneProcess) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = join_group();
        const std::vector<int> batches = {2, 4};
        auto data = [](int r, int s) {
          torch::manual_seed(2000 + 100 * r + s);
          return std::pair{torch::randn({3 + r, 10}), torch::randn({3 + r, 10})};
        };
        auto make_sgd = [](std::vector<at::Tensor> p) {
          return std::make_unique<torch::optim::SGD>(p,
                                                     torch::optim::SGDOptions(0.05).momentum(0.9));
        };
        for (int stage : {1, 2}) {
          torch::manual_seed(31);
          auto model = std::make_shared<TwoLayers>();
          auto ref = copy_of(*model);
          std::unique_ptr<DistributedDataParallel> ddp;
          if (stage == 1) ddp = std::make_unique<DistributedDataParallel>(model, pg);
          ZeroRedundancyOptimizer opt(model->parameters(), pg, make_sgd, {.stage = stage});
          std::vector<parallel::Joinable*> joinables;
          if (ddp) joinables.push_back(ddp.get());
          joinables.push_back(&opt);
          parallel::run_joined(joinables, {}, [&] {
            for (int s = 0; s < batches[static_cast<size_t>(rank)]; ++s) {
              auto [x, y] = data(rank, s);
              opt.zero_grad();
              torch::mse_loss(ddp ? ddp->forward(x) : model->forward(x), y).backward();
              opt.step();
            }
          });
          auto opt_ref = make_sgd(ref->parameters());
          for (int s = 0; s < 4; ++s) {
            opt_ref->zero_grad();
            for (int r = 0; r < 2; ++r) {
              if (s >= batches[static_cast<size_t>(r)]) continue;
              auto [x, y] = data(r, s);
              (torch::mse_loss(ref->forward(x), y) / 2).backward();
            }
            opt_ref->step();
          }
          for (size_t i = 0; i < ref->parameters().size(); ++i)
            if (!torch::allclose(model->parameters()[i], ref->parameters()[i], 1e-5, 1e-6))
              throw Error(fmt::format("rank {}: stage {}: parameter {} differs from one process's",
                                      rank, stage, i));
        }
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

}  // namespace
}  // namespace cohort::libtorch
