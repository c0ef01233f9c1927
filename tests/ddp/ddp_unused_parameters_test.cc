// DistributedDataParallel's find_unused_parameters as PyTorch defines it,
// with real processes (cohort::spawn): a parameter no rank used keeps the
// .grad it had before the step (undefined after zero_grad(set_to_none), so
// SGD's weight decay and momentum leave it alone), also when the forward
// returns several outputs and one of them stays out of the loss (PyTorch's
// test_output_unused_in_loss); one used on some ranks gets the average
// (ddp_test.cc). Each rank compares with a reference it computes itself; a
// mismatch throws, which spawn reports as the failed rank.
#include <gtest/gtest.h>

#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<distributed::ProcessGroup> join_group() {
  return distributed::init_process_group("native", "env://", -1, -1, 60s);
}

// Two linear layers; forward_both returns both outputs.
class TwoLayers : public nn::Cloneable<TwoLayers> {
 public:
  explicit TwoLayers(Generator& gen) : Cloneable("TwoLayers") {
    register_module("a", std::make_shared<nn::Linear>(10, 10, gen));
    register_module("b", std::make_shared<nn::Linear>(10, 10, gen));
  }
  // b is used only when use_b (the rest of the time it takes no part).
  Tensor forward(const Tensor& x) override {
    Tensor h = child<nn::Linear>(0).forward(x);
    return use_b ? child<nn::Linear>(1).forward(relu(h)) : h;
  }
  std::vector<Tensor> forward_both(const Tensor& x) {
    return {child<nn::Linear>(0).forward(x), child<nn::Linear>(1).forward(x)};
  }
  bool use_b = true;
};

void expect_same(const nn::Module& got, const nn::Module& want, int rank, const std::string& what,
                 bool bitwise) {
  auto g = got.named_parameters(), w = want.named_parameters();
  for (size_t i = 0; i < g.size(); ++i) {
    const Tensor& a = g[i].second;
    const Tensor& b = w[i].second;
    const bool same = bitwise ? equal(a, b) : allclose(a, b, 1e-5, 1e-6);
    if (!same)
      throw Error(fmt::format("rank {}: {}: parameter {} differs", rank, what, g[i].first));
    const Tensor ga = a.grad(), gb = b.grad();
    if (ga.defined() != gb.defined())
      throw Error(fmt::format("rank {}: {}: {} has {} .grad, the reference {}", rank, what,
                              g[i].first, ga.defined() ? "a" : "no",
                              gb.defined() ? "has one" : "has none"));
    if (ga.defined() && !allclose(ga, gb, 1e-5, 1e-6))
      throw Error(fmt::format("rank {}: {}: gradient of {} differs", rank, what, g[i].first));
  }
}

TEST(DDPUnusedParameters, UnusedOnEveryRankKeepsNoGradientAndWeightDecaySkipsIt) {
  spawn(
      [](int rank) {
        auto pg = join_group();
        Generator gen(3);
        auto model = std::make_shared<TwoLayers>(gen);
        model->use_b = false;
        auto ref = model->clone_as<TwoLayers>();
        const Tensor b_before = model->named_parameters()[2].second.clone();
        DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
        optim::SGDOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1};
        optim::SGD opt(ddp.parameters(), o), opt_ref(ref->parameters(), o);
        for (int s = 0; s < 4; ++s) {
          Generator dg(10 + static_cast<uint64_t>(s));
          Tensor x = randn({4, 10}, dg);  // the same rows on every rank
          opt.zero_grad(/*set_to_none=*/true);
          sum(ddp.forward(x)).backward();
          opt.step();
          opt_ref.zero_grad(true);
          sum(ref->forward(x)).backward();
          opt_ref.step();
        }
        expect_same(*model, *ref, rank, "unused layer b", /*bitwise=*/false);
        if (!equal(model->named_parameters()[2].second, b_before))
          throw Error(fmt::format("rank {}: the unused b.weight moved", rank));
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDPUnusedParameters, ZeroGradientFromZeroGradStaysZero) {
  // zero_grad() without set_to_none leaves zeros, in PyTorch too: the
  // unused parameter's .grad is defined and zero, not another rank's value.
  spawn(
      [](int rank) {
        auto pg = join_group();
        Generator gen(4);
        auto model = std::make_shared<TwoLayers>(gen);
        DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
        Generator dg(5);
        Tensor x = randn({4, 10}, dg);
        sum(ddp.forward(x)).backward();  // both layers used: every .grad defined
        model->use_b = false;
        for (int s = 0; s < 2; ++s) {
          ddp.zero_grad();
          sum(ddp.forward(x)).backward();
        }
        Tensor g = model->named_parameters()[2].second.grad();
        if (!g.defined() || sum(abs(g)).item<double>() != 0.0)
          throw Error(fmt::format("rank {}: b.weight's zeroed .grad is not zero", rank));
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDPUnusedParameters, OutputLeftOutOfTheLossLeavesItsGradientsAlone) {
  // PyTorch's test_output_unused_in_loss: forward returns (a(x), b(x)).
  // Steps 0-1 use both outputs, later ones only b's: a's gradient keeps
  // the value it had after step 1 (no zero_grad in between), as in one
  // process.
  spawn(
      [](int rank) {
        auto pg = join_group();
        Generator gen(6);
        auto model = std::make_shared<TwoLayers>(gen);
        auto ref = model->clone_as<TwoLayers>();
        DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
        Generator dg(7);
        Tensor x = randn({10, 10}, dg);
        {
          // First: only b's output in the loss; a.weight has no .grad.
          std::vector<Tensor> out = ddp.forward_outputs(
              [&](nn::Module& m) { return dynamic_cast<TwoLayers&>(m).forward_both(x); });
          sum(out[1]).backward();
          std::vector<Tensor> local = ref->forward_both(x);
          sum(local[1]).backward();
          if (model->named_parameters()[0].second.grad().defined())
            throw Error(fmt::format("rank {}: a.weight got a .grad from an unused output", rank));
          expect_same(*model, *ref, rank, "first step", /*bitwise=*/false);
        }
        ddp.zero_grad();
        ref->zero_grad();
        for (int i = 0; i < 6; ++i) {
          std::vector<Tensor> out = ddp.forward_outputs(
              [&](nn::Module& m) { return dynamic_cast<TwoLayers&>(m).forward_both(x); });
          std::vector<Tensor> local = ref->forward_both(x);
          if (i < 2) {
            sum(matmul(out[0], out[1])).backward();
            sum(matmul(local[0], local[1])).backward();
          } else {
            sum(out[1]).backward();
            sum(local[1]).backward();
          }
          expect_same(*model, *ref, rank, fmt::format("step {}", i), /*bitwise=*/false);
        }
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDPUnusedParameters, NamedOutputLeftOutOfTheLossKeepsNoGradient) {
  // PyTorch's DictOutputModule: {"a": a(x), "b": b(x)}, the loss from "b".
  spawn(
      [](int rank) {
        auto pg = join_group();
        Generator gen(16);
        auto model = std::make_shared<TwoLayers>(gen);
        auto ref = model->clone_as<TwoLayers>();
        DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
        Generator dg(17);
        Tensor x = randn({10, 10}, dg);
        auto named = [&](TwoLayers& m) {
          std::vector<Tensor> both = m.forward_both(x);
          return std::map<std::string, Tensor>{{"a", both[0]}, {"b", both[1]}};
        };
        for (int i = 0; i < 2; ++i) {
          auto out = ddp.forward_named_outputs(
              [&](nn::Module& m) { return named(dynamic_cast<TwoLayers&>(m)); });
          sum(out.at("b")).backward();
          sum(named(*ref).at("b")).backward();
          expect_same(*model, *ref, rank, fmt::format("named outputs, step {}", i),
                      /*bitwise=*/false);
        }
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDPUnusedParameters, ParameterUnusedOnlyOnSomeRanksIsAveraged) {
  // Rank 1 leaves b out, rank 0 uses it: b's gradient is rank 0's / 2 on
  // both, and defined on both.
  spawn(
      [](int rank) {
        auto pg = join_group();
        Generator gen(8);
        auto model = std::make_shared<TwoLayers>(gen);
        auto ref = model->clone_as<TwoLayers>();
        DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
        Generator dg(9);
        Tensor x = randn({4, 10}, dg);
        model->use_b = rank == 0;
        sum(ddp.forward(x)).backward();
        ref->use_b = true;
        Tensor l0 = sum(ref->forward(x));
        ref->use_b = false;
        Tensor l1 = sum(ref->forward(x));
        mul(add(l0, l1), 0.5).backward();
        expect_same(*model, *ref, rank, "b used on rank 0 only", /*bitwise=*/false);
        distributed::destroy_process_group(pg);
      },
      2);
}

}  // namespace
}  // namespace cohort::parallel
