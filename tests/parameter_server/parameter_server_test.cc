// The parameter server and the distributed optimizer with real processes
// (forked; an RPC group over a FileStore). Checked against one process:
// synchronous mode gives the weights one process reaches on the global batch
// (float32 tolerance, SGD with momentum, baseline kernels) with 1 server and 2
// trainers apart, 2 servers co-located with 2 trainers, and 2 servers apart
// from 2 trainers. SSP and async train (the loss falls; the servers' counters
// show the gap never passed the bound); a trainer killed in async mode is
// dropped and named while the others finish; in sync mode it fails the job
// naming it, fast; a killed server fails every trainer naming it, fast. The
// distributed optimizer steps parameters on two owners as a local optimizer
// would. Registered again with COHORT_TRANSPORT=tcp (read here, at the test's
// edge) to run over TCP. Every check runs in a child; a failed one makes the
// child exit non-zero, which the parent's EXPECT reports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/cpu.h"
#include "cohort/nn/models/net.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_optimizer/distributed_optimizer.h"
#include "cohort/parallel/distributed_optimizer/parameter_owner.h"
#include "cohort/parallel/parameter_server/parameter_server_client.h"
#include "cohort/parallel/parameter_server/parameter_server_service.h"
#include "cohort/rendezvous/file_store.h"
#include "tests/distributed/process_runner.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

rpc::RpcOptions rpc_options() {
  rpc::RpcOptions o;
  const char* t = std::getenv("COHORT_TRANSPORT");
  o.force_tcp = t != nullptr && std::string(t) == "tcp";
  o.init_timeout = 60s;
  o.shutdown_timeout = 30s;
  // Servers register after init; on a loaded machine a trainer's first call
  // may come more than the default grace before.
  o.unregistered_grace = 20s;
  return o;
}

// Who is who: `servers` and `trainers` RPC names, and what process r is.
struct Layout {
  std::vector<std::string> servers, trainers;
  bool colocated = false;
  int processes() const {
    return colocated ? static_cast<int>(servers.size())
                     : static_cast<int>(servers.size() + trainers.size());
  }
  std::string name(int rank) const {
    if (colocated) return trainers[static_cast<size_t>(rank)];
    return rank < static_cast<int>(servers.size())
               ? servers[static_cast<size_t>(rank)]
               : trainers[static_cast<size_t>(rank) - servers.size()];
  }
  int server_index(int rank) const {
    if (colocated) return rank;
    return rank < static_cast<int>(servers.size()) ? rank : -1;
  }
  int trainer_index(int rank) const {
    if (colocated) return rank;
    const int t = rank - static_cast<int>(servers.size());
    return t >= 0 ? t : -1;
  }
};

// The CLI's layout: the first S ranks serve, the others train.
Layout apart(int servers, int trainers) {
  Layout l;
  for (int s = 0; s < servers; ++s) l.servers.push_back(fmt::format("ps{}", s));
  for (int t = 0; t < trainers; ++t) l.trainers.push_back(fmt::format("t{}", t));
  return l;
}

// Every process is a server and a trainer.
Layout colocated(int n) {
  Layout l;
  l.colocated = true;
  for (int r = 0; r < n; ++r) {
    l.servers.push_back(fmt::format("w{}", r));
    l.trainers.push_back(fmt::format("w{}", r));
  }
  return l;
}

std::shared_ptr<rpc::RpcAgent> join(const Layout& l, const std::string& path, int rank,
                                    rpc::RpcOptions o = rpc_options()) {
  auto store = std::make_shared<rendezvous::FileStore>(path, 60s);
  return rpc::init_rpc(l.name(rank), rank, l.processes(), store, o);
}

OptimizerFactory plain_sgd(double lr) {
  return [lr](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = lr});
  };
}

OptimizerFactory sgd_momentum(double lr = 0.01) {
  return [lr](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = lr, .momentum = 0.9});
  };
}

// ---- models and data -------------------------------------------------------

enum class Model { kNet, kMlp };

std::shared_ptr<nn::Module> make_model(Model m) {
  // The same seed everywhere: servers take their shards from it, trainers
  // start from it (they pull before the first step anyway).
  Generator gen(42);
  if (m == Model::kNet) return std::make_shared<nn::Net>(gen);
  return nn::make_mlp(gen, {.width = 64, .hidden_layers = 2});
}

constexpr int64_t kGlobalBatch = 32;

std::pair<Tensor, Tensor> batch_of(int step) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  return {rand({kGlobalBatch, 1, 28, 28}, gen), randint(0, 10, {kGlobalBatch}, gen)};
}

nn::NamedTensors train_reference(Model m, int steps) {
  auto model = make_model(m);
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    nll_loss(model->forward(x), y).backward();
    opt.step();
  }
  return model->named_parameters();
}

void check_state(const TensorDict& got, const nn::NamedTensors& want, const std::string& what) {
  for (const auto& [name, w] : want) {
    const Tensor* g = got.find(name);
    if (g == nullptr) throw Error(what + ": no " + name + " in the full state");
    if (!allclose(*g, w, 1e-3, 1e-4)) {
      auto a = g->to_vector<float>(), b = w.to_vector<float>();
      double worst = 0;
      for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, double(std::fabs(a[k] - b[k])));
      throw Error(
          fmt::format("{}: {} differs from one process (max |diff| {})", what, name, worst));
    }
  }
}

// ---- synchronous equivalence -----------------------------------------------

void sync_equivalence(const Layout& l, Model m, int steps) {
  std::string path = testing::temp_path("cohort-ps-sync");
  const int n_trainers = static_cast<int>(l.trainers.size());
  auto status = testing::run_processes(l.processes(), 90s, [&](int rank) {
    // Batch splits change the rounding of the Winograd/avx kernels, not of
    // the baseline ones (see tests/ddp/ddp_test.cc).
    KernelPathGuard exact_kernels(KernelPath::kBaseline);
    auto agent = join(l, path, rank);
    auto model = make_model(m);
    std::unique_ptr<ParameterServerService> service;
    if (l.server_index(rank) >= 0)
      service = serve_parameter_server(agent, *model, l.servers, l.trainers, l.server_index(rank),
                                       sgd_momentum(), {.mode = PsMode::kSync, .timeout = 30s});
    if (const int t = l.trainer_index(rank); t >= 0) {
      ParameterServerClient client(agent, model, l.servers, t);
      const int64_t local = kGlobalBatch / n_trainers;
      for (int s = 0; s < steps; ++s) {
        auto [x, y] = batch_of(s);
        client.pull();
        model->zero_grad();
        nll_loss(model->forward(x.narrow(0, t * local, local)), y.narrow(0, t * local, local))
            .backward();
        client.push();
      }
      // The servers' latest weights (what a checkpoint holds) are one
      // process's on the global batch.
      check_state(client.full_state_dict(), train_reference(m, steps),
                  fmt::format("trainer {}", t));
      for (const auto& st : client.server_stats()) {
        if (st.version != steps || st.max_clock_gap != 0)
          throw Error(fmt::format("server stats: version {} (want {}), max gap {}", st.version,
                                  steps, st.max_clock_gap));
      }
      client.finish();
    }
    if (service && !service->wait_done(30s)) throw Error("trainers did not finish");
    service.reset();
    agent->shutdown();
  });
  ::unlink(path.c_str());
  for (size_t r = 0; r < status.size(); ++r)
    EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r << " status " << status[r];
}

TEST(ParameterServerSync, OneServerTwoTrainersMatchOneProcess) {
  sync_equivalence(apart(1, 2), Model::kNet, 4);
}

TEST(ParameterServerSync, TwoServersColocatedWithTwoTrainersMatchOneProcess) {
  sync_equivalence(colocated(2), Model::kMlp, 6);
}

TEST(ParameterServerSync, TwoServersApartFromTwoTrainersMatchOneProcess) {
  sync_equivalence(apart(2, 2), Model::kMlp, 6);
}

TEST(ParameterServerSync, FullStateLoadsIntoTheServers) {
  std::string path = testing::temp_path("cohort-ps-load");
  Layout l = apart(2, 1);
  auto status = testing::run_processes(3, 60s, [&](int rank) {
    auto agent = join(l, path, rank);
    auto model = make_model(Model::kMlp);
    std::unique_ptr<ParameterServerService> service;
    if (l.server_index(rank) >= 0)
      service = serve_parameter_server(agent, *model, l.servers, l.trainers, rank, sgd_momentum(),
                                       {.mode = PsMode::kSync});
    if (l.trainer_index(rank) == 0) {
      ParameterServerClient client(agent, model, l.servers, 0);
      Generator gen(7);
      TensorDict resume = nn::make_mlp(gen, {.width = 64, .hidden_layers = 2})->state_dict();
      client.load_full_state_dict(resume);
      client.pull();
      TensorDict got = client.full_state_dict();
      for (const auto& [name, t] : resume) {
        if (!got.contains(name) || !allclose(got.at(name), t, 0, 0))
          throw Error("servers do not hold the loaded " + name);
        if (!allclose(*model->state_dict().find(name), t, 0, 0))
          throw Error("the pull did not bring the loaded " + name);
      }
      TensorDict bad = resume;
      bad.insert_or_assign("0.weight", Tensor::zeros({3}));
      bool threw = false;
      try {
        client.load_full_state_dict(bad);
      } catch (const InvalidArgument&) {
        threw = true;
      }
      if (!threw) throw Error("a state with a wrong shape was loaded");
      client.finish();
    }
    if (service && !service->wait_done(30s)) throw Error("trainer did not finish");
    service.reset();
    agent->shutdown();
  });
  ::unlink(path.c_str());
  for (size_t r = 0; r < status.size(); ++r) EXPECT_TRUE(testing::exited_ok(status[r])) << r;
}

// ---- bounded staleness and async ------------------------------------------

// A small learnable problem: the trainers fit the same fixed 16 samples
// (each sees them every step), so the loss must fall whatever the staleness.
std::pair<Tensor, Tensor> fixed_batch(int /*trainer*/) {
  Generator gen(500);
  return {rand({16, 1, 28, 28}, gen), randint(0, 10, {16}, gen)};
}

struct LooseRun {
  PsMode mode = PsMode::kSsp;
  int64_t staleness = 1;
  int trainers = 3;
  int steps = 60;
  int killed = -1;  // this trainer _exits at step 5
};

void loose_run(const LooseRun& run) {
  std::string path = testing::temp_path("cohort-ps-loose");
  Layout l = apart(1, run.trainers);
  auto status = testing::run_processes(l.processes(), 90s, [&](int rank) {
    auto agent = join(l, path, rank);
    auto model = make_model(Model::kMlp);
    if (rank == 0) {
      auto service =
          serve_parameter_server(agent, *model, l.servers, l.trainers, 0, plain_sgd(0.1),
                                 {.mode = run.mode, .staleness = run.staleness, .timeout = 30s},
                                 {.probe_interval = 200ms, .probe_timeout = 5s});
      if (!service->wait_done(60s)) throw Error("trainers did not finish");
      auto st = service->server().stats();
      std::fprintf(stderr, "server: version %lld, max gap %lld, waits %lld, lost %zu\n",
                   static_cast<long long>(st.version), static_cast<long long>(st.max_clock_gap),
                   static_cast<long long>(st.pulls_waited), st.lost.size());
      if (run.mode == PsMode::kSsp && st.max_clock_gap > run.staleness)
        throw Error(
            fmt::format("a pull saw gap {} > staleness {}", st.max_clock_gap, run.staleness));
      if (run.mode == PsMode::kSsp && st.pulls_waited == 0)
        throw Error("no pull ever waited for the slow trainer");
      if (run.mode == PsMode::kAsync && st.pulls_waited != 0) throw Error("an async pull waited");
      if (run.killed >= 0) {
        const std::string who = l.trainers[static_cast<size_t>(run.killed)];
        if (st.lost.size() != 1 || st.lost[0].name != who)
          throw Error(
              fmt::format("the server did not report {} as lost ({} lost)", who, st.lost.size()));
        if (static_cast<int>(st.finished.size()) != run.trainers - 1)
          throw Error("the surviving trainers did not all finish");
      } else if (!st.lost.empty()) {
        throw Error("a trainer was lost: " + st.lost[0].reason);
      }
      service.reset();
      agent->shutdown();
      return;
    }
    const int t = l.trainer_index(rank);
    ParameterServerClient client(agent, model, l.servers, t);
    auto [x, y] = fixed_batch(t);
    double first = 0;
    for (int s = 0; s < run.steps; ++s) {
      if (t == run.killed && s == 5) ::_exit(3);
      // The last trainer is slow: the others run into the staleness bound.
      if (t == run.trainers - 1) std::this_thread::sleep_for(15ms);
      client.pull();
      model->zero_grad();
      Tensor loss = nll_loss(model->forward(x), y);
      loss.backward();
      client.push();
      if (s == 0) first = loss.item<double>();
    }
    // The loss at the weights after this trainer's last push.
    client.pull();
    double last = 0;
    {
      NoGradGuard no_grad;
      last = nll_loss(model->forward(x), y).item<double>();
    }
    client.finish();
    std::fprintf(stderr, "trainer %d: loss %.4f -> %.4f\n", t, first, last);
    if (!(last < first * 0.85))
      throw Error(fmt::format("trainer {}: loss {} -> {} did not fall", t, first, last));
    agent->shutdown();
  });
  ::unlink(path.c_str());
  for (size_t r = 0; r < status.size(); ++r) {
    if (run.killed >= 0 && static_cast<int>(r) - 1 == run.killed)
      EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 3) << "rank " << r;
    else
      EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r << " status " << status[r];
  }
}

TEST(ParameterServerSsp, TrainsWithinTheStalenessBound) { loose_run({}); }

TEST(ParameterServerAsync, Trains) { loose_run({.mode = PsMode::kAsync}); }

TEST(ParameterServerAsync, KilledTrainerIsDroppedAndTheOthersFinish) {
  loose_run({.mode = PsMode::kAsync, .killed = 1});
}

TEST(ParameterServerSsp, KilledTrainerIsDroppedAndTheOthersFinish) {
  loose_run({.mode = PsMode::kSsp, .staleness = 2, .killed = 0});
}

TEST(ParameterServerAsync, SilentTrainerIsDroppedAtTheDeadline) {
  std::string path = testing::temp_path("cohort-ps-silent");
  Layout l = apart(1, 2);
  auto status = testing::run_processes(3, 60s, [&](int rank) {
    auto agent = join(l, path, rank);
    auto model = make_model(Model::kMlp);
    if (rank == 0) {
      // A 1 s deadline: t1 hangs (alive, answering probes) for 4 s.
      auto service = serve_parameter_server(agent, *model, l.servers, l.trainers, 0, plain_sgd(0.1),
                                            {.mode = PsMode::kAsync, .timeout = 1s},
                                            {.probe_interval = 200ms});
      if (!service->wait_done(30s)) throw Error("the hung trainer was never dropped");
      auto st = service->server().stats();
      if (st.lost.size() != 1 || st.lost[0].name != "t1" ||
          !contains(st.lost[0].reason, "no pull or push for more than 1000 ms"))
        throw Error("t1 was not reported lost for its silence");
      service.reset();
      agent->shutdown();
      return;
    }
    const int t = l.trainer_index(rank);
    ParameterServerClient client(agent, model, l.servers, t);
    auto [x, y] = fixed_batch(t);
    for (int s = 0; s < 10; ++s) {
      client.pull();
      model->zero_grad();
      nll_loss(model->forward(x), y).backward();
      if (t == 1 && s == 3) {
        std::this_thread::sleep_for(4s);
        try {
          client.push();
        } catch (const Error& e) {
          if (!contains(e.what(), "dropped")) throw;
          agent->shutdown();
          return;
        }
        throw Error("a push after the deadline was accepted");
      }
      client.push();
    }
    client.finish();
    agent->shutdown();
  });
  ::unlink(path.c_str());
  for (size_t r = 0; r < status.size(); ++r)
    EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r << " status " << status[r];
}

// ---- failures --------------------------------------------------------------

TEST(ParameterServerFault, SyncTrainerKilledFailsTheJobNamingIt) {
  std::string path = testing::temp_path("cohort-ps-sync-kill");
  Layout l = apart(1, 2);
  // Deadlines far beyond the test's limit: only failure detection ends the waits.
  auto status = testing::run_processes(3, 45s, [&](int rank) {
    auto agent = join(l, path, rank);
    auto model = make_model(Model::kMlp);
    if (rank == 0) {
      auto service = serve_parameter_server(agent, *model, l.servers, l.trainers, 0, sgd_momentum(),
                                            {.mode = PsMode::kSync, .timeout = 300s},
                                            {.probe_interval = 200ms});
      try {
        service->wait_done(300s);
      } catch (const PeerLost& e) {
        if (!contains(e.what(), "'t1' (worker 1)"))
          throw Error(std::string("the server's error does not name t1: ") + e.what());
        std::fprintf(stderr, "server failed as expected: %s\n", e.what());
        service.reset();
        agent->shutdown(false);
        return;
      }
      throw Error("the server finished without t1");
    }
    const int t = l.trainer_index(rank);
    ParameterServerClient client(agent, model, l.servers, t, {.timeout = 300s});
    auto [x, y] = fixed_batch(t);
    for (int s = 0; s < 10; ++s) {
      if (t == 1 && s == 2) ::_exit(3);
      try {
        client.pull();
      } catch (const PeerLost& e) {
        std::string m = e.what();
        if (s != 3 || !contains(m, "'t1' (worker 1)") || !contains(m, "server 'ps0'") ||
            !contains(m, "trainer 't0'"))
          throw Error("the pull's error does not name the step, t1 and the server: " + m);
        std::fprintf(stderr, "t0 failed as expected: %s\n", m.c_str());
        agent->shutdown(false);
        return;
      }
      model->zero_grad();
      nll_loss(model->forward(x), y).backward();
      client.push();
    }
    throw Error("trained on without t1");
  });
  ::unlink(path.c_str());
  EXPECT_TRUE(testing::exited_ok(status[0]));
  EXPECT_TRUE(testing::exited_ok(status[1]));
  EXPECT_TRUE(WIFEXITED(status[2]) && WEXITSTATUS(status[2]) == 3);
}

TEST(ParameterServerFault, KilledServerFailsEveryTrainerNamingIt) {
  std::string path = testing::temp_path("cohort-ps-server-kill");
  Layout l = apart(2, 2);
  auto status = testing::run_processes(4, 45s, [&](int rank) {
    auto agent = join(l, path, rank);
    auto model = make_model(Model::kMlp);
    if (rank < 2) {
      auto service = serve_parameter_server(agent, *model, l.servers, l.trainers, rank,
                                            sgd_momentum(), {.mode = PsMode::kAsync});
      if (rank == 1) {
        // ps1 dies once the trainers are under way.
        while (service->server().stats().version < 6) std::this_thread::sleep_for(1ms);
        ::_exit(3);
      }
      service->wait_done(60s);  // the trainers fail: they never finish here
      service.reset();
      agent->shutdown(false);
      return;
    }
    const int t = l.trainer_index(rank);
    ParameterServerClient client(agent, model, l.servers, t, {.timeout = 300s});
    auto [x, y] = fixed_batch(t);
    for (int s = 0; s < 1000; ++s) {
      try {
        client.pull();
        model->zero_grad();
        nll_loss(model->forward(x), y).backward();
        client.push();
      } catch (const PeerLost& e) {
        std::string m = e.what();
        if (!contains(m, "server 'ps1'") || !contains(m, "ps1"))
          throw Error("the error does not name the lost server: " + m);
        std::fprintf(stderr, "t%d failed as expected: %s\n", t, m.c_str());
        agent->shutdown(false);
        return;
      }
    }
    throw Error("trained on without ps1");
  });
  ::unlink(path.c_str());
  EXPECT_TRUE(WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 3);
  EXPECT_TRUE(testing::exited_ok(status[2]));
  EXPECT_TRUE(testing::exited_ok(status[3]));
}

// ---- distributed optimizer -------------------------------------------------

// Owner k's part: Linear(8, 4) from seed 10 + k, fitted to fixed data by its
// own backward; the gradient it holds is what a remote step uses.
std::shared_ptr<nn::Linear> owner_layer(int k) {
  Generator gen(10 + static_cast<uint64_t>(k));
  return std::make_shared<nn::Linear>(8, 4, gen);
}
std::pair<Tensor, Tensor> owner_data(int k) {
  Generator gen(20 + static_cast<uint64_t>(k));
  return {rand({6, 8}, gen), rand({6, 4}, gen)};
}
void owner_backward(nn::Linear& layer, int k) {
  auto [x, y] = owner_data(k);
  mse_loss(layer.forward(x), y).backward();
}

TEST(DistributedOptimizer, StepsParametersOnTheirOwnersAsALocalOptimizer) {
  std::string path = testing::temp_path("cohort-dist-optim");
  constexpr int kSteps = 5;
  auto status = testing::run_processes(3, 60s, [&](int rank) {
    auto store = std::make_shared<rendezvous::FileStore>(path, 60s);
    const std::string name = rank == 0 ? "driver" : fmt::format("owner{}", rank);
    auto agent = rpc::init_rpc(name, rank, 3, store, rpc_options());
    if (rank > 0) {
      auto layer = owner_layer(rank);
      ParameterOwner owner(agent, layer->named_parameters(), sgd_momentum(0.1));
      // The owner's backward, on the driver's command (a stand-in for a
      // distributed backward that leaves gradients on each owner).
      agent->register_function("test.backward", [&](const rpc::CallContext&, rpc::Message) {
        owner_backward(*layer, rank);
        return rpc::Message();
      });
      agent->shutdown();  // serves the driver until it shuts down too
      if (owner.num_steps() != kSteps)
        throw Error(fmt::format("owner{} stepped {} times", rank, owner.num_steps()));
      if (owner.num_optimizers() != 0) throw Error("the remote optimizer was not released");
      return;
    }
    std::vector<ParamRef> refs = {
        {"owner1", "weight"}, {"owner1", "bias"}, {"owner2", "weight"}, {"owner2", "bias"}};
    {
      DistributedOptimizer opt(agent, refs);
      if (opt.owners() != std::vector<std::string>{"owner1", "owner2"})
        throw Error("owners in the wrong order");
      for (int s = 0; s < kSteps; ++s) {
        opt.zero_grad();
        for (const char* o : {"owner1", "owner2"}) agent->rpc_sync(o, "test.backward", {});
        opt.step();
      }
      // The same with local optimizers.
      std::vector<Tensor> want;
      for (int k = 1; k <= 2; ++k) {
        auto layer = owner_layer(k);
        auto opt_local = sgd_momentum(0.1)(layer->parameters());
        for (int s = 0; s < kSteps; ++s) {
          opt_local->zero_grad();
          owner_backward(*layer, k);
          opt_local->step();
        }
        for (const auto& [n, t] : layer->named_parameters()) want.push_back(t);
      }
      auto got = opt.fetch();
      for (size_t i = 0; i < got.size(); ++i)
        if (!allclose(got[i], want[i], 1e-5, 1e-6))
          throw Error(
              fmt::format("{}.{} differs from the local optimizer's", refs[i].owner, refs[i].name));
      // Unknown names are refused, naming the owner and the name.
      bool threw = false;
      try {
        DistributedOptimizer bad(agent, {{"owner2", "nope"}});
      } catch (const InvalidArgument& e) {
        threw = contains(e.what(), "owner2") && contains(e.what(), "'nope'");
        if (!threw)
          throw Error(std::string("the error does not name owner2 and nope: ") + e.what());
      }
      if (!threw) throw Error("an unknown parameter was accepted");
    }
    agent->shutdown();
  });
  ::unlink(path.c_str());
  for (size_t r = 0; r < status.size(); ++r)
    EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r << " status " << status[r];
}

}  // namespace
}  // namespace cohort::parallel
