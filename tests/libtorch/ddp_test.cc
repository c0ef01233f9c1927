// cohort::libtorch::DistributedDataParallel with real processes over a
// LibTorch model (dist-mnist's CNN without its dropout layers, whose random
// masks would differ between batch splits): W ranks x batch 64/W reach the
// parameters that one process with batch 64 reaches after 20 SGD steps (fp32
// tolerance) at 2 and 4 ranks, also with no_sync accumulation and with
// copied (not bucket-view) gradients; buckets in reverse registration order
// with .grad over the buckets' memory; an all_reduce that starts and ends
// while backward still runs (shown by timestamps: backward's last node waits
// for bucket 0 to complete, which it can only do if DDP issued it during
// backward); unused parameters found or named; different models named; a
// killed worker ends the others' backward with cohort::PeerLost naming it.
// The equivalence at 2 and 4 ranks and the killed worker run over shared
// memory and again over TCP between the ranks (COHORT_TRANSPORT=tcp, set by
// each rank itself, what ranks on different hosts use); each checks the
// transport its group got. Each rank checks itself; a mismatch throws, which
// spawn reports.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>

#include "cohort/base/error.h"
#include "cohort/launch/spawn.h"
#include "cohort/libtorch/distributed_data_parallel.h"
#include "tests/distributed/process_runner.h"

namespace cohort::libtorch {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kGlobalBatch = 64;

// dist-mnist's model, without Dropout2d/dropout.
struct Net : torch::nn::Module {
  Net()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 10, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(10, 20, 5)))),
        fc1(register_module("fc1", torch::nn::Linear(320, 50))),
        fc2(register_module("fc2", torch::nn::Linear(50, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2->forward(x), 2));
    x = torch::relu(fc1->forward(x.view({-1, 320})));
    return torch::log_softmax(fc2->forward(x), 1);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};

enum class Transport { kShm, kTcp };

// Chooses the transport of the group this process joins next (independent of
// the caller's environment).
void use_transport(Transport t) {
  if (t == Transport::kTcp) {
    ::setenv("COHORT_TRANSPORT", "tcp", 1);
  } else {
    ::unsetenv("COHORT_TRANSPORT");
  }
}

void expect_transport(const ProcessGroup& pg, Transport t) {
  const std::string want = t == Transport::kTcp ? "tcp" : "shm";
  for (int p = 0; p < pg.size(); ++p) {
    if (p == pg.rank()) continue;
    std::string got = pg.group()->transport_name(p);
    if (got != want)
      throw Error(
          fmt::format("rank {}: transport to rank {} is {}, expected {}", pg.rank(), p, got, want));
  }
}

ProcessGroup join(Transport t = Transport::kShm) {
  use_transport(t);
  auto pg = init_process_group("native", "env://", -1, -1, 60s);
  expect_transport(pg, t);
  return pg;
}

// The samples of step `step` (the same on every rank): x [64,1,28,28], y [64].
std::pair<torch::Tensor, torch::Tensor> batch_of(int step) {
  torch::manual_seed(1000 + step);
  return {torch::rand({kGlobalBatch, 1, 28, 28}), torch::randint(0, 10, {kGlobalBatch})};
}

// Rank 0's initial model; other ranks start elsewhere, DDP must overwrite it.
std::shared_ptr<Net> make_net(int rank) {
  torch::manual_seed(rank == 0 ? 42 : 4242 + rank);
  return std::make_shared<Net>();
}

torch::optim::SGD make_sgd(const std::vector<torch::Tensor>& params) {
  return torch::optim::SGD(params, torch::optim::SGDOptions(0.01).momentum(0.9));
}

std::vector<torch::Tensor> train_reference(int steps) {
  auto model = make_net(0);
  auto opt = make_sgd(model->parameters());
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    torch::nll_loss(model->forward(x), y).backward();
    opt.step();
  }
  return model->parameters();
}

void check_params(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                  int rank, const std::string& what) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, (got[i] - want[i]).abs().max().item<double>());
  std::printf("rank %d: %s: max |diff| to one-process training %.3g\n", rank, what.c_str(), worst);
  for (size_t i = 0; i < got.size(); ++i) {
    if (!torch::allclose(got[i], want[i], 1e-4, 1e-5)) {
      throw Error(
          fmt::format("rank {}: {}: parameter {} differs from one-process training (max "
                      "|diff| {})",
                      rank, what, i, (got[i] - want[i]).abs().max().item<double>()));
    }
  }
}

struct Equivalence {
  int steps = 20;
  double bucket_cap_mb = 25.0;
  int micro_batches = 1;  // > 1: accumulate with no_sync
  bool as_view = true;
  Transport transport = Transport::kShm;
};

void run_equivalence(int rank, const Equivalence& e) {
  torch::set_num_threads(1);
  auto pg = join(e.transport);
  const int world = pg.size();
  const int64_t local = kGlobalBatch / world;
  auto model = make_net(rank);
  DistributedDataParallel ddp(
      model, pg, {.bucket_cap_mb = e.bucket_cap_mb, .gradient_as_bucket_view = e.as_view});
  auto opt = make_sgd(ddp.parameters());
  for (int s = 0; s < e.steps; ++s) {
    auto [x, y] = batch_of(s);
    auto xl = x.narrow(0, rank * local, local);
    auto yl = y.narrow(0, rank * local, local);
    opt.zero_grad();
    const int64_t micro = local / e.micro_batches;
    for (int m = 0; m < e.micro_batches; ++m) {
      auto run = [&] {
        auto out = ddp.forward(xl.narrow(0, m * micro, micro));
        (torch::nll_loss(out, yl.narrow(0, m * micro, micro)) / e.micro_batches).backward();
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
  if (ddp.num_reductions() != e.steps)
    throw Error(
        fmt::format("rank {}: {} reductions for {} steps", rank, ddp.num_reductions(), e.steps));
  check_params(
      model->parameters(), train_reference(e.steps), rank,
      fmt::format("{} ranks, {} micro-batches, bucket {} MiB, view {}, {}", world, e.micro_batches,
                  e.bucket_cap_mb, e.as_view, e.transport == Transport::kTcp ? "tcp" : "shm"));
  auto g = pg.group();
  distributed::destroy_process_group(g);
}

TEST(LibTorchDDP, TwoRanksMatchOneProcessOverTwentySteps) {
  spawn([](int rank) { run_equivalence(rank, {}); }, 2);
}

TEST(LibTorchDDP, FourRanksWithSmallBucketsMatchOneProcessOverTwentySteps) {
  spawn([](int rank) { run_equivalence(rank, {.bucket_cap_mb = 0.01}); }, 4);
}

TEST(LibTorchDDP, TwoRanksOverTcpMatchOneProcessOverTwentySteps) {
  spawn([](int rank) { run_equivalence(rank, {.transport = Transport::kTcp}); }, 2);
}

TEST(LibTorchDDP, FourRanksOverTcpWithSmallBucketsMatchOneProcessOverTwentySteps) {
  spawn(
      [](int rank) {
        run_equivalence(rank, {.bucket_cap_mb = 0.01, .transport = Transport::kTcp});
      },
      4);
}

TEST(LibTorchDDP, NoSyncAccumulationMatchesOneProcess) {
  spawn([](int rank) { run_equivalence(rank, {.steps = 10, .micro_batches = 2}); }, 2);
}

TEST(LibTorchDDP, CopiedGradientsMatchOneProcess) {
  spawn([](int rank) { run_equivalence(rank, {.steps = 10, .as_view = false}); }, 2);
}

TEST(LibTorchDDP, BucketsFollowReverseRegistrationOrderAndHoldTheGradients) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = join();
        auto model = make_net(rank);
        DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0.01});
        // fc1.weight (62.5 KB) exceeds the 10 KB cap: a bucket of its own.
        std::vector<std::vector<std::string>> want = {{"fc2.bias", "fc2.weight", "fc1.bias"},
                                                      {"fc1.weight"},
                                                      {"conv2.bias"},
                                                      {"conv2.weight"},
                                                      {"conv1.bias", "conv1.weight"}};
        if (ddp.bucket_parameter_names() != want) throw Error("unexpected bucket assignment");
        auto [x, y] = batch_of(0);
        torch::nll_loss(ddp.forward(x.narrow(0, rank * 32, 32)), y.narrow(0, rank * 32, 32))
            .backward();
        auto named = model->named_parameters();
        auto names = ddp.bucket_parameter_names();
        for (size_t b = 0; b < names.size(); ++b) {
          const auto& buf = ddp.bucket_buffer(b);
          auto* lo = static_cast<std::byte*>(buf.data_ptr());
          for (const auto& n : names[b]) {
            auto* g = static_cast<std::byte*>(named[n].grad().data_ptr());
            if (g < lo || g >= lo + buf.nbytes())
              throw Error("grad of " + n + " is not in bucket " + std::to_string(b));
          }
        }
        // zero_grad (detach_ + zero_) keeps the gradients in the buckets.
        auto opt = make_sgd(model->parameters());
        opt.zero_grad();
        if (named["fc2.bias"].grad().data_ptr() != ddp.bucket_buffer(0).data_ptr())
          throw Error("zero_grad moved fc2.bias's gradient out of its bucket");
        if (ddp.bucket_buffer(0).abs().sum().item<double>() != 0.0)
          throw Error("zero_grad did not zero the bucket");
        // Module::zero_grad (grad = grad.detach(); zero_()) too, from the next forward on.
        torch::nll_loss(ddp.forward(x.narrow(0, rank * 32, 32)), y.narrow(0, rank * 32, 32))
            .backward();
        model->zero_grad();
        torch::nll_loss(ddp.forward(x.narrow(0, rank * 32, 32)), y.narrow(0, rank * 32, 32))
            .backward();
        if (named["fc2.bias"].grad().data_ptr() != ddp.bucket_buffer(0).data_ptr() ||
            ddp.bucket_buffer(0).abs().sum().item<double>() == 0.0)
          throw Error("after Module::zero_grad the gradients are not in their buckets");
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

TEST(LibTorchDDP, ASmallModelGetsAboutFourBucketsByDefault) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = join();
        auto model = make_net(rank);
        // 87,360 gradient bytes, under the automatic 1 MiB cap: a quarter each.
        DistributedDataParallel ddp(model, pg);
        std::vector<std::vector<std::string>> want = {
            {"fc2.bias", "fc2.weight", "fc1.bias"},
            {"fc1.weight"},
            {"conv2.bias", "conv2.weight", "conv1.bias", "conv1.weight"}};
        if (ddp.bucket_parameter_names() != want)
          throw Error(fmt::format("unexpected default buckets ({} buckets)", ddp.num_buckets()));
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

TEST(LibTorchDDP, AnAllReduceStartsAndEndsBeforeBackwardEnds) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = join();
        auto model = make_net(rank);
        DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0.01});
        auto [x, y] = batch_of(0);
        auto xl = x.narrow(0, rank * 32, 32).clone().requires_grad_(true);
        // The input's gradient comes out of conv1's backward, among backward's
        // last steps: it waits there until bucket 0 (fc2, fc1.bias) was
        // all-reduced, which needs DDP to have issued it during backward.
        using Clock = std::chrono::steady_clock;
        Clock::time_point hook_time;
        bool bucket0_done = false;
        xl.register_hook([&](torch::Tensor g) {
          auto deadline = Clock::now() + 30s;
          distributed::Work w = ddp.bucket_work(0);
          while (w.defined() && !w.is_completed() && Clock::now() < deadline)
            std::this_thread::sleep_for(100us);
          bucket0_done = w.defined() && w.is_success();
          hook_time = Clock::now();
          return g;
        });
        auto t0 = Clock::now();
        torch::nll_loss(ddp.forward(xl), y.narrow(0, rank * 32, 32)).backward();
        auto t_end = Clock::now();
        if (!bucket0_done) throw Error("bucket 0 was not reduced while backward ran");
        ReductionTrace tr = ddp.last_trace();
        if (tr.buckets.size() != 5) throw Error("expected 5 buckets");
        const auto& b0 = tr.buckets[0];
        auto start = b0.started.value_or(b0.launched);
        if (!(start < hook_time && hook_time < t_end))
          throw Error("bucket 0 did not start before backward's end");
        auto us = [&](Clock::time_point t) {
          return std::chrono::duration_cast<std::chrono::microseconds>(t - t0).count();
        };
        std::printf(
            "rank %d (us since forward): backward's first gradient %lld, bucket 0 launched %lld "
            "started %lld finished %lld, input gradient (waited for bucket 0) %lld, last "
            "gradient %lld, all buckets reduced %lld, backward returned %lld\n",
            rank, (long long)us(tr.first_gradient), (long long)us(b0.launched),
            (long long)us(start), (long long)us(b0.finished.value_or(start)),
            (long long)us(hook_time), (long long)us(tr.last_gradient), (long long)us(tr.reduced),
            (long long)us(t_end));
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

// Two heads; `use_b` decides per rank whether head b takes part.
struct TwoHeads : torch::nn::Module {
  TwoHeads()
      : a(register_module("a", torch::nn::Linear(6, 3))),
        b(register_module("b", torch::nn::Linear(3, 3))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto h = a->forward(x);
    return use_b ? b->forward(torch::relu(h)) : h;
  }
  torch::nn::Linear a, b;
  bool use_b = true;
};

TEST(LibTorchDDP, FindUnusedParametersAveragesZerosForUnusedOnes) {
  spawn(
      [](int rank) {
        torch::set_num_threads(1);
        auto pg = join();
        torch::manual_seed(5);
        auto model = std::make_shared<TwoHeads>();
        auto ref = std::make_shared<TwoHeads>();
        {
          torch::NoGradGuard ng;
          for (size_t i = 0; i < ref->parameters().size(); ++i)
            ref->parameters()[i].copy_(model->parameters()[i]);
        }
        DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
        auto opt = make_sgd(model->parameters());
        auto opt_ref = make_sgd(ref->parameters());
        for (int s = 0; s < 5; ++s) {
          torch::manual_seed(77 + s);
          auto x = torch::randn({8, 6});
          auto y = torch::randn({8, 3});
          auto uses_b = [&](int r) {
            return !(r == 1 && s % 2 == 0);
          };  // rank 1 skips b on even steps
          model->use_b = uses_b(rank);
          opt.zero_grad();
          torch::mse_loss(ddp.forward(x.narrow(0, rank * 4, 4)), y.narrow(0, rank * 4, 4))
              .backward();
          opt.step();
          // Reference: the average of each rank's gradients, zero where unused.
          opt_ref.zero_grad();
          for (int r = 0; r < 2; ++r) {
            ref->use_b = uses_b(r);
            (torch::mse_loss(ref->forward(x.narrow(0, r * 4, 4)), y.narrow(0, r * 4, 4)) / 2)
                .backward();
          }
          opt_ref.step();
        }
        check_params(model->parameters(), ref->parameters(), rank, "find_unused_parameters");
        auto g = pg.group();
        distributed::destroy_process_group(g);
      },
      2);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

ProcessGroup join_file(const std::string& path, int rank, int n, Transport t = Transport::kShm) {
  use_transport(t);
  // 300 s: far beyond the tests' limits; only failure detection ends the waits.
  auto pg = init_process_group("native", "file://" + path, n, rank, 300s);
  expect_transport(pg, t);
  return pg;
}

TEST(LibTorchDDPFault, UnusedParameterWithoutFindUnusedIsNamed) {
  std::string path = testing::temp_path("cohort-torch-ddp-unused");
  auto status = testing::run_processes(2, 60s, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = join_file(path, rank, 2);
    torch::manual_seed(1);
    auto model = std::make_shared<TwoHeads>();
    DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 1e-4});
    auto x = torch::randn({4, 6});
    if (rank == 1) {
      model->use_b = false;
      ddp.forward(x).sum().backward();  // b.* get no gradient: their bucket never launches
      try {
        ddp.forward(x);
      } catch (const InvalidArgument& e) {
        std::string m = e.what();
        if (!contains(m, "'b.weight'") || !contains(m, "find_unused_parameters"))
          throw Error("message does not name the unused parameters: " + m);
        return;  // exiting closes the connections: rank 0 sees the loss
      }
      throw Error("second forward did not report the unfinished reduction");
    }
    try {
      ddp.forward(x).sum().backward();
    } catch (const PeerLost&) {
      return;  // rank 1 left without reducing b.*
    }
    throw Error("rank 0's backward finished although rank 1 never reduced b.*");
  });
  ::unlink(path.c_str());
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r;
}

TEST(LibTorchDDPFault, DifferentModelsAreNamedOnEveryRank) {
  std::string path = testing::temp_path("cohort-torch-ddp-models");
  auto status = testing::run_processes(2, 60s, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = join_file(path, rank, 2);
    std::shared_ptr<torch::nn::Module> model =
        rank == 0 ? std::static_pointer_cast<torch::nn::Module>(std::make_shared<Net>())
                  : std::make_shared<TwoHeads>();
    try {
      DistributedDataParallel ddp(model, pg);
    } catch (const InvalidArgument& e) {
      std::string m = e.what();
      if (!contains(m, "different models") || !contains(m, "conv1.weight") ||
          !contains(m, "rank 1"))
        throw Error("message does not name the difference: " + m);
      return;
    }
    throw Error("DDP accepted different models");
  });
  ::unlink(path.c_str());
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r;
}

void run_killed_worker(Transport t) {
  std::string path = testing::temp_path("cohort-torch-ddp-kill");
  auto status = testing::run_processes(3, 60s, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = join_file(path, rank, 3, t);
    auto model = make_net(rank);
    DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 0.01});
    auto opt = make_sgd(model->parameters());
    for (int s = 0; s < 1000; ++s) {
      if (rank == 1 && s == 3) ::raise(SIGKILL);
      auto [x, y] = batch_of(s);
      opt.zero_grad();
      try {
        torch::nll_loss(ddp.forward(x.narrow(0, rank * 16, 16)), y.narrow(0, rank * 16, 16))
            .backward();
      } catch (const PeerLost& e) {
        std::string m = e.what();
        if (!contains(m, "rank 1") || !contains(m, "DistributedDataParallel"))
          throw Error("PeerLost does not name DDP and rank 1: " + m);
        std::fprintf(stderr, "rank %d step %d: %s\n", rank, s, m.c_str());
        return;
      }
      opt.step();
    }
    throw Error("training went on without rank 1");
  });
  ::unlink(path.c_str());
  for (int r : {0, 2}) EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r;
  EXPECT_TRUE(WIFSIGNALED(status[1]));
}

TEST(LibTorchDDPFault, KilledWorkerEndsTheOthersBackwardNamingIt) {
  run_killed_worker(Transport::kShm);
}

TEST(LibTorchDDPFault, KilledWorkerOverTcpEndsTheOthersBackwardNamingIt) {
  run_killed_worker(Transport::kTcp);
}

}  // namespace
}  // namespace cohort::libtorch
