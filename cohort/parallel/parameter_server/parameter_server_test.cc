// ParameterServer driven in-process: threads play the workers, with clocks,
// delays and deaths, so the modes' rules are checked without RPC.
#include "cohort/parallel/parameter_server/parameter_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "cohort/optim/sgd.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

// One parameter "w" [2], starting at 0; plain SGD with lr 1, so each
// optimizer step subtracts exactly the gradient it is given.
std::unique_ptr<ParameterServer> make_server(ParameterServerOptions o) {
  nn::NamedTensors shard = {{"w", Tensor::zeros({2})}};
  return std::make_unique<ParameterServer>(
      shard,
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 1.0});
      },
      std::move(o));
}

std::vector<Tensor> grad_of(double v) { return {Tensor::full({2}, v)}; }

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(ParameterServer, SyncAveragesAllWorkersBeforeTheNextPull) {
  constexpr int kWorkers = 3, kSteps = 8;
  auto ps = make_server({.mode = PsMode::kSync, .num_workers = kWorkers, .timeout = 20s});
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int t = 0; t < kSteps; ++t) {
        // A late worker: the others must wait for it at every step.
        if (w == 2) std::this_thread::sleep_for(2ms);
        PullResult r = ps->pull(w, t);
        // Step t's pull sees exactly the t steps before it: w = -2 t (mean of 1, 2, 3).
        if (r.version != t || r.weights[0].to_vector<float>()[0] != -2.0f * t) ++bad;
        ps->push(w, t, grad_of(w + 1));
      }
      ps->finish(w);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  auto s = ps->stats();
  EXPECT_EQ(s.version, kSteps);
  EXPECT_EQ(s.max_clock_gap, 0);
  EXPECT_GT(s.pulls_waited, 0);
  EXPECT_EQ(ps->state_dict().at("w").to_vector<float>(), (std::vector<float>{-16.0f, -16.0f}));
  EXPECT_TRUE(ps->wait_done(1s));
}

TEST(ParameterServer, SyncSumsInWorkerOrderWhateverTheArrivalOrder) {
  auto ps = make_server({.mode = PsMode::kSync, .num_workers = 2});
  ps->pull(0, 0);
  ps->pull(1, 0);
  ps->push(1, 0, grad_of(3));
  EXPECT_EQ(ps->stats().version, 0);  // waiting for worker 0
  ps->push(0, 0, grad_of(1));
  EXPECT_EQ(ps->stats().version, 1);
  EXPECT_EQ(ps->pull(0, 1).weights[0].to_vector<float>()[0], -2.0f);
}

// Workers with different speeds under a staleness bound: returns the stats.
ParameterServerStats run_workers(PsMode mode, int64_t staleness, int workers, int steps) {
  auto ps =
      make_server({.mode = mode, .staleness = staleness, .num_workers = workers, .timeout = 20s});
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        for (int t = 0; t < steps; ++t) {
          ps->pull(w, t);
          // Worker 0 is much slower than the others.
          std::this_thread::sleep_for(w == 0 ? 3ms : 100us);
          ps->push(w, t, grad_of(1));
        }
        ps->finish(w);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  auto s = ps->stats();
  EXPECT_EQ(s.version, int64_t{workers} * steps);  // one optimizer step per push
  EXPECT_EQ(s.pushes, int64_t{workers} * steps);
  // kMean: each push moves w by 1/workers, so w = -steps at the end.
  EXPECT_NEAR(ps->state_dict().at("w").to_vector<float>()[0], -steps, 1e-4);
  return s;
}

TEST(ParameterServer, SspNeverLetsTheGapExceedTheBound) {
  for (int64_t s : {0, 1, 3}) {
    auto st = run_workers(PsMode::kSsp, s, 4, 20);
    EXPECT_LE(st.max_clock_gap, s) << "staleness " << s;
    // With one slow worker the fast ones run into the bound: they waited,
    // and the gap reached it.
    EXPECT_GT(st.pulls_waited, 0) << "staleness " << s;
    EXPECT_EQ(st.max_clock_gap, s) << "staleness " << s;
  }
}

TEST(ParameterServer, AsyncNeverWaits) {
  auto st = run_workers(PsMode::kAsync, 0, 3, 20);
  EXPECT_EQ(st.pulls_waited, 0);
  EXPECT_GT(st.max_clock_gap, 3);  // the fast workers ran far ahead of the slow one
}

TEST(ParameterServer, SyncTimeoutNamesTheMissingWorkerAndFailsTheServer) {
  auto ps = make_server({.mode = PsMode::kSync,
                         .num_workers = 3,
                         .timeout = 200ms,
                         .name = "ps0",
                         .worker_names = {"a", "b", "c"}});
  for (int w = 0; w < 3; ++w) ps->pull(w, 0);
  ps->push(0, 0, grad_of(1));
  ps->push(1, 0, grad_of(1));
  try {
    ps->pull(0, 1);
    FAIL() << "pull returned without worker c's gradients";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_TRUE(contains(m, "ps0") && contains(m, "'c' (worker 2)") && contains(m, "step 0")) << m;
  }
  // Failed for good: the other worker's pull fails at once with the same error.
  EXPECT_THROW(ps->pull(1, 1), TimeoutError);
  EXPECT_THROW(ps->wait_done(1s), TimeoutError);
}

TEST(ParameterServer, SyncLostWorkerFailsWaitingPulls) {
  auto ps = make_server({.mode = PsMode::kSync,
                         .num_workers = 2,
                         .timeout = 30s,
                         .name = "ps0",
                         .worker_names = {"a", "b"}});
  ps->pull(0, 0);
  ps->pull(1, 0);
  ps->push(0, 0, grad_of(1));
  std::thread dropper([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(ps->awaited_workers(), std::vector<int>{1});
    ps->drop_worker(1, "connection reset");
  });
  try {
    ps->pull(0, 1);
    ADD_FAILURE() << "pull returned without worker b";
  } catch (const PeerLost& e) {
    std::string m = e.what();
    EXPECT_TRUE(contains(m, "'b' (worker 1)") && contains(m, "connection reset")) << m;
  }
  dropper.join();
  ASSERT_EQ(ps->stats().lost.size(), 1u);
  EXPECT_EQ(ps->stats().lost[0].name, "b");
}

TEST(ParameterServer, SspDropsALostWorkerAndTheOthersGoOn) {
  auto ps = make_server({.mode = PsMode::kSsp,
                         .staleness = 1,
                         .num_workers = 3,
                         .timeout = 30s,
                         .worker_names = {"a", "b", "c"}});
  // c pulls step 0 and dies; a and b run ahead until the bound stops them.
  ps->pull(2, 0);
  std::atomic<bool> done{false};
  std::thread fast([&] {
    for (int t = 0; t < 10; ++t)
      for (int w = 0; w < 2; ++w) {
        ps->pull(w, t);
        ps->push(w, t, grad_of(1));
      }
    done = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(done.load());  // blocked at step 2 by c at step 0
  EXPECT_EQ(ps->awaited_workers(), std::vector<int>{2});
  ps->drop_worker(2, "PeerLost");
  fast.join();
  auto s = ps->stats();
  ASSERT_EQ(s.lost.size(), 1u);
  EXPECT_EQ(s.lost[0].worker, 2);
  EXPECT_EQ(s.active_workers, 2);
  EXPECT_LE(s.max_clock_gap, 1);
  // The dropped worker's later calls fail, naming the drop.
  try {
    ps->push(2, 0, grad_of(1));
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "dropped")) << e.what();
  }
  ps->finish(0);
  ps->finish(1);
  EXPECT_TRUE(ps->wait_done(1s));
}

TEST(ParameterServer, SspTimeoutNamesTheSlowestWorker) {
  auto ps = make_server({.mode = PsMode::kSsp,
                         .staleness = 0,
                         .num_workers = 2,
                         .timeout = 100ms,
                         .worker_names = {"a", "b"}});
  ps->pull(0, 0);
  ps->push(0, 0, grad_of(1));
  try {
    ps->pull(0, 1);
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "'b' (worker 1) at step 0")) << e.what();
  }
  // ssp does not fail the server: once b catches up, a goes on.
  ps->pull(1, 0);
  ps->push(1, 0, grad_of(1));
  EXPECT_EQ(ps->pull(0, 1).version, 2);
}

TEST(ParameterServer, FinishedWorkersNoLongerHoldOthersBack) {
  auto ps = make_server({.mode = PsMode::kSsp, .staleness = 0, .num_workers = 2, .timeout = 5s});
  ps->pull(1, 0);
  ps->finish(1);
  for (int t = 0; t < 3; ++t) {
    ps->pull(0, t);
    ps->push(0, t, grad_of(1));
  }
  EXPECT_THROW(ps->pull(1, 0), InvalidArgument);
}

TEST(ParameterServer, RejectsWrongClocksWorkersAndShapes) {
  auto ps = make_server({.mode = PsMode::kAsync, .num_workers = 2});
  EXPECT_THROW(ps->pull(0, 3), InvalidArgument);
  EXPECT_THROW(ps->pull(2, 0), InvalidArgument);
  EXPECT_THROW(ps->push(0, 1, grad_of(1)), InvalidArgument);
  EXPECT_THROW(ps->push(0, 0, {Tensor::zeros({3})}), InvalidArgument);
  EXPECT_THROW(ps->push(0, 0, {}), InvalidArgument);
  EXPECT_THROW(make_server({.num_workers = 0}), InvalidArgument);
  EXPECT_THROW(make_server({.mode = PsMode::kSsp, .staleness = -1}), InvalidArgument);
  EXPECT_EQ(parse_ps_mode("ssp"), PsMode::kSsp);
  EXPECT_THROW(parse_ps_mode("bsp"), InvalidArgument);
}

TEST(ParameterServer, StateDictRoundTripAndOptimizerState) {
  auto ps = make_server({.mode = PsMode::kAsync, .num_workers = 1});
  TensorDict d;
  d.insert("w", Tensor::full({2}, 5.0));
  d.insert("other", Tensor::zeros({7}));  // a full model's state: extra names ignored
  ps->load_state_dict(d);
  ps->pull(0, 0);
  ps->push(0, 0, grad_of(1));
  EXPECT_EQ(ps->state_dict().at("w").to_vector<float>(), (std::vector<float>{4.0f, 4.0f}));
  TensorDict wrong;
  wrong.insert("w", Tensor::zeros({3}));
  EXPECT_THROW(ps->load_state_dict(wrong), InvalidArgument);
  EXPECT_THROW(ps->load_state_dict(TensorDict{}), InvalidArgument);
}

}  // namespace
}  // namespace cohort::parallel
