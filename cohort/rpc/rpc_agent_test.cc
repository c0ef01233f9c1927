// RpcAgent tests with real processes (fork): round trips with payloads,
// concurrency, errors, nested calls, timeouts, remote references and their
// reference counts, peers dying on either side, shutdown. Run over Unix
// sockets (one host) and, registered again with COHORT_TRANSPORT=tcp, over
// TCP (read here, at the test's edge, into RpcOptions::force_tcp).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/rendezvous/file_store.h"
#include "cohort/rpc/rpc_agent.h"
#include "tests/distributed/process_runner.h"

namespace cohort::rpc {
namespace {

using namespace std::chrono_literals;

// The checks inside a child process: a failed one throws, the child exits 1
// with the message on stderr, and the parent's EXPECT on the status fails.
#define RPC_CHECK(cond, ...)                                                                   \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      throw std::runtime_error(fmt::format("{}:{}: check '{}' failed: {}", __FILE__, __LINE__, \
                                           #cond, fmt::format("" __VA_ARGS__)));               \
    }                                                                                          \
  } while (0)

using testing::run_processes;

std::string temp_path() { return testing::temp_path("cohort-rpc-test"); }

bool exited_with(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

void expect_all_ok(const std::vector<int>& status) {
  for (size_t r = 0; r < status.size(); ++r) {
    EXPECT_TRUE(exited_with(status[r], 0)) << "rank " << r << " status " << status[r];
  }
}

std::string worker(int r) { return "w" + std::to_string(r); }

std::shared_ptr<RpcAgent> join(const std::string& store_path, int rank, int world,
                               RpcOptions opts = {}) {
  const char* t = std::getenv("COHORT_TRANSPORT");
  opts.force_tcp = t != nullptr && std::string(t) == "tcp";
  opts.init_timeout = 30s;
  // Workers register their functions right after init; on a loaded machine
  // (ctest -j with other multi-process tests) a peer's first call can come
  // more than the default 2 s before that. Tests of the grace itself set less.
  if (opts.unregistered_grace == RpcOptions{}.unregistered_grace) opts.unregistered_grace = 20s;
  auto store = std::make_shared<rendezvous::FileStore>(store_path, rendezvous::Duration(30000));
  return init_rpc(worker(rank), rank, world, store, opts);
}

std::string text(const Message& m, size_t i) {
  auto b = m.buffer(i);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Echo: the header reversed, each buffer sent back (the received bytes, no copy).
Message echo(const CallContext& ctx, Message m) {
  Message r(std::string(m.header().rbegin(), m.header().rend()));
  for (size_t i = 0; i < m.num_buffers(); ++i) {
    auto b = m.buffer(i);
    r.add_buffer(b.data(), b.size(), m.buffer_owner(i));
  }
  r.add_copy(ctx.caller_name.data(), ctx.caller_name.size());
  return r;
}

Message add_one(const CallContext&, Message m) {
  int64_t v = std::stoll(m.header());
  return Message(std::to_string(v + 1));
}

template <typename E>
std::string expect_throw(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("wrong exception type: ") + e.what());
  }
  throw std::runtime_error("no exception");
}

TEST(RpcAgent, RoundTripWithPayloads) {
  std::string path = temp_path();
  auto status = run_processes(2, 60s, [&](int rank) {
    auto agent = join(path, rank, 2);
    RPC_CHECK(agent->name() == worker(rank) && agent->world_size() == 2);
    RPC_CHECK(agent->worker_name(1 - rank) == worker(1 - rank));
    RPC_CHECK(agent->rank_of(worker(1 - rank)) == 1 - rank);
    // Registered after init: a call arriving first waits for it (grace).
    agent->register_function("echo", echo);
    if (rank == 0) {
      auto small = std::make_shared<std::vector<uint8_t>>(1000);
      for (size_t i = 0; i < small->size(); ++i) (*small)[i] = static_cast<uint8_t>(i * 7);
      auto big = std::make_shared<std::vector<uint8_t>>(8u << 20);
      for (size_t i = 0; i < big->size(); ++i) (*big)[i] = static_cast<uint8_t>(i * 31 + i / 4096);
      for (int to : {1, 0}) {  // the peer, then this worker itself
        Message m("hello");
        m.add_buffer(small->data(), small->size(), small);
        m.add_buffer(nullptr, 0, nullptr);
        m.add_buffer(big->data(), big->size(), big);
        Message r = agent->rpc_sync(worker(to), "echo", std::move(m));
        RPC_CHECK(r.header() == "olleh", "header '{}'", r.header());
        RPC_CHECK(r.num_buffers() == 4, "{} buffers", r.num_buffers());
        RPC_CHECK(r.buffer(0).size() == small->size() &&
                  std::memcmp(r.buffer(0).data(), small->data(), small->size()) == 0);
        RPC_CHECK(r.buffer(1).empty());
        RPC_CHECK(r.buffer(2).size() == big->size() &&
                  std::memcmp(r.buffer(2).data(), big->data(), big->size()) == 0);
        RPC_CHECK(reinterpret_cast<uintptr_t>(r.buffer(2).data()) % 64 == 0 || to == 0);
        RPC_CHECK(text(r, 3) == "w0", "caller '{}'", text(r, 3));
      }
    }
    agent->shutdown();
  });
  expect_all_ok(status);
}

TEST(RpcAgent, ManyConcurrentCallsFromThreads) {
  std::string path = temp_path();
  auto status = run_processes(3, 60s, [&](int rank) {
    auto agent = join(path, rank, 3);
    agent->register_function("add_one", add_one);
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::pair<int64_t, Future>> futures;
        for (int i = 0; i < 150; ++i) {
          int64_t v = rank * 100000 + t * 1000 + i;
          int to = (rank + 1 + i % 2) % 3;  // both other workers
          futures.emplace_back(v,
                               agent->rpc_async(worker(to), "add_one", Message(std::to_string(v))));
        }
        for (auto& [v, f] : futures) {
          if (std::stoll(f.wait().header()) != v + 1) ++bad;
        }
      });
    }
    for (auto& th : threads) th.join();
    RPC_CHECK(bad.load() == 0, "{} wrong results", bad.load());
    // then(): runs once the reply is in.
    std::atomic<int> seen{0};
    Future f = agent->rpc_async(worker((rank + 1) % 3), "add_one", Message("41"));
    f.then([&](const Future& done) { seen = std::stoi(done.wait().header()); });
    f.wait();
    RPC_CHECK(f.done());
    for (int i = 0; i < 1000 && seen.load() == 0; ++i) std::this_thread::sleep_for(1ms);
    RPC_CHECK(seen.load() == 42);
    agent->shutdown();
  });
  expect_all_ok(status);
}

TEST(RpcAgent, HandlerErrorsAndUnknownFunctions) {
  std::string path = temp_path();
  auto status = run_processes(2, 60s, [&](int rank) {
    RpcOptions opts;
    opts.unregistered_grace = 300ms;
    auto agent = join(path, rank, 2, opts);
    agent->register_function("bad_arg", [](const CallContext&, Message) -> Message {
      throw InvalidArgument("shape [3, 4] does not match [4, 3]");
    });
    agent->register_function("std_error", [](const CallContext&, Message) -> Message {
      throw std::runtime_error("plain failure");
    });
    if (rank == 0) {
      std::string e = expect_throw<InvalidArgument>([&] { agent->rpc_sync("w1", "bad_arg", {}); });
      RPC_CHECK(e.find("'w1'") != std::string::npos && e.find("'bad_arg'") != std::string::npos &&
                    e.find("shape [3, 4] does not match [4, 3]") != std::string::npos &&
                    e.find("'w0'") != std::string::npos,
                "{}", e);
      e = expect_throw<Error>([&] { agent->rpc_sync("w1", "std_error", {}); });
      RPC_CHECK(e.find("'w1'") != std::string::npos && e.find("plain failure") != std::string::npos,
                "{}", e);
      e = expect_throw<InvalidArgument>([&] { agent->rpc_sync("w1", "no.such.fn", {}); });
      RPC_CHECK(e.find("unknown function 'no.such.fn'") != std::string::npos &&
                    e.find("'w1'") != std::string::npos && e.find("bad_arg") != std::string::npos,
                "{}", e);
      e = expect_throw<InvalidArgument>([&] { agent->rpc_async("nobody", "bad_arg", {}); });
      RPC_CHECK(e.find("'nobody'") != std::string::npos, "{}", e);
    }
    agent->shutdown();
  });
  expect_all_ok(status);
}

TEST(RpcAgent, NestedCallToThirdWorker) {
  std::string path = temp_path();
  auto status = run_processes(3, 60s, [&](int rank) {
    auto agent = join(path, rank, 3);
    agent->register_function("leaf", [](const CallContext& ctx, Message m) {
      return Message(m.header() + "<leaf@" + ctx.agent->name() + " from " + ctx.caller_name + ">");
    });
    agent->register_function("relay", [](const CallContext& ctx, Message m) {
      // Blocks a handler thread on another RPC: allowed, handlers are not the I/O thread.
      Message r = ctx.agent->rpc_sync("w2", "leaf", Message(m.header() + "|relay@w1"));
      return Message(r.header() + "|back");
    });
    if (rank == 0) {
      std::vector<Future> fs;
      for (int i = 0; i < 20; ++i) fs.push_back(agent->rpc_async("w1", "relay", Message("x")));
      for (auto& f : fs) {
        std::string h = f.wait().header();
        RPC_CHECK(h == "x|relay@w1<leaf@w2 from w1>|back", "{}", h);
      }
    }
    agent->shutdown();
  });
  expect_all_ok(status);
}

TEST(RpcAgent, TimeoutNamesCalleeAndFunction) {
  std::string path = temp_path();
  auto status = run_processes(2, 60s, [&](int rank) {
    auto agent = join(path, rank, 2);
    agent->register_function("sleepy", [](const CallContext&, Message) {
      std::this_thread::sleep_for(1500ms);
      return Message("late");
    });
    if (rank == 0) {
      std::string e = expect_throw<TimeoutError>(
          [&] { agent->rpc_sync("w1", "sleepy", {}, CallOptions{200ms}); });
      RPC_CHECK(e.find("'sleepy'") != std::string::npos && e.find("'w1'") != std::string::npos &&
                    e.find("200 ms") != std::string::npos,
                "{}", e);
      Future f = agent->rpc_async("w1", "sleepy", {}, CallOptions{100ms});
      RPC_CHECK(f.wait_for(20s));
      RPC_CHECK(f.error() != nullptr);
    }
    agent->shutdown();  // waits for the sleeping handlers on w1
  });
  expect_all_ok(status);
}

TEST(RpcAgent, RemoteReferencesAndRefcounts) {
  std::string path = temp_path();
  auto status = run_processes(3, 60s, [&](int rank) {
    auto agent = join(path, rank, 3);
    agent->register_function("make", [](const CallContext&, Message m) {
      Message v("value:" + m.header());
      std::string payload(100000, 'p');
      v.add_copy(payload.data(), payload.size());
      return v;
    });
    agent->register_function(
        "fail", [](const CallContext&, Message) -> Message { throw Error("cannot make it"); });
    agent->register_function("owned", [](const CallContext& ctx, Message) {
      return Message(std::to_string(ctx.agent->owned_rref_count()));
    });
    // Owner side: look the value up by id.
    agent->register_function("peek", [](const CallContext& ctx, Message m) {
      Message v = ctx.agent->local_value(std::stoull(m.header()));
      return Message(v.header());
    });
    // w2 keeps the references it is given until told to drop them.
    auto held = std::make_shared<std::vector<RRef>>();
    auto held_mu = std::make_shared<std::mutex>();
    agent->register_function("hold", [held, held_mu](const CallContext& ctx, Message m) {
      RRef r = RRef::deserialize(*ctx.agent, m.header());
      std::string h = r.to_here().header();
      std::lock_guard<std::mutex> lock(*held_mu);
      held->push_back(r);
      return Message(h);
    });
    agent->register_function("drop", [held, held_mu](const CallContext&, Message) {
      std::lock_guard<std::mutex> lock(*held_mu);
      held->clear();
      return Message();
    });
    if (rank == 0) {
      auto owned_on_w1 = [&] { return std::stoi(agent->rpc_sync("w1", "owned", {}).header()); };
      {
        RRef r = agent->remote("w1", "make", Message("a"));
        RPC_CHECK(r.owner() == 1 && r.owner_name() == "w1" && !r.is_owner());
        Message v = r.to_here();
        RPC_CHECK(v.header() == "value:a" && v.num_buffers() == 1 && v.buffer(0).size() == 100000);
        r.created().wait();
        RPC_CHECK(owned_on_w1() == 1);
        std::string peek = agent->rpc_sync("w1", "peek", Message(std::to_string(r.id()))).header();
        RPC_CHECK(peek == "value:a", "{}", peek);
        RRef copy = r;  // a copy in this process: the same reference
        std::string h = agent->rpc_sync("w2", "hold", Message(r.serialize())).header();
        RPC_CHECK(h == "value:a", "{}", h);
      }
      // w0 dropped its references; w2 still holds one.
      RPC_CHECK(owned_on_w1() == 1, "owned {}", owned_on_w1());
      agent->rpc_sync("w2", "drop", {});
      int owned = -1;
      for (int i = 0; i < 500 && owned != 0; ++i) {
        owned = owned_on_w1();
        if (owned != 0) std::this_thread::sleep_for(10ms);
      }
      RPC_CHECK(owned == 0, "w1 still owns {} values after every user dropped them", owned);
      // A failing creation surfaces at to_here and at created().
      RRef bad = agent->remote("w1", "fail", {});
      std::string e = expect_throw<Error>([&] { bad.to_here(); });
      RPC_CHECK(e.find("cannot make it") != std::string::npos && e.find("w1") != std::string::npos,
                "{}", e);
      RPC_CHECK(bad.created().wait_for(20s) && bad.created().error() != nullptr);
      // A value owned by this worker itself.
      RRef mine = agent->remote("w0", "make", Message("self"));
      RPC_CHECK(mine.is_owner() && mine.to_here().header() == "value:self");
      RPC_CHECK(agent->local_value(mine.id()).header() == "value:self");
    }
    agent->shutdown();
  });
  expect_all_ok(status);
}

TEST(RpcAgent, FetchAfterOwnerDeathNamesIt) {
  std::string path = temp_path();
  auto status = run_processes(2, 60s, [&](int rank) {
    auto agent = join(path, rank, 2);
    agent->register_function("make", [](const CallContext&, Message) { return Message("v"); });
    agent->register_function("die", [](const CallContext&, Message) -> Message { ::_exit(3); });
    if (rank == 0) {
      RRef r = agent->remote("w1", "make", {});
      RPC_CHECK(r.to_here().header() == "v");
      agent->rpc_async("w1", "die", {});
      std::string e = expect_throw<PeerLost>([&] {
        for (int i = 0; i < 1000; ++i) {
          r.to_here();
          std::this_thread::sleep_for(10ms);
        }
      });
      RPC_CHECK(e.find("'w1'") != std::string::npos, "{}", e);
      agent->shutdown(true, 5s);
    } else {
      std::this_thread::sleep_for(30s);  // until "die"
    }
  });
  EXPECT_TRUE(exited_with(status[0], 0)) << status[0];
  EXPECT_TRUE(exited_with(status[1], 3)) << status[1];
}

TEST(RpcAgent, CalleeDiesMidCallFailsFast) {
  std::string path = temp_path();
  auto status = run_processes(3, 60s, [&](int rank) {
    auto agent = join(path, rank, 3);
    agent->register_function("add_one", add_one);
    agent->register_function("die", [](const CallContext&, Message) -> Message {
      std::this_thread::sleep_for(100ms);
      ::_exit(3);
    });
    if (rank == 0) {
      auto start = Clock::now();
      std::string e =
          expect_throw<PeerLost>([&] { agent->rpc_sync("w1", "die", {}, CallOptions{30s}); });
      auto took = Clock::now() - start;
      RPC_CHECK(e.find("'w1'") != std::string::npos && e.find("'die'") != std::string::npos, "{}",
                e);
      // Far below the timeout: the closed connection says it, not the clock.
      RPC_CHECK(took < 15s, "took {} ms",
                std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
      // Later calls to the dead worker fail at once; the others still answer.
      expect_throw<PeerLost>([&] { agent->rpc_sync("w1", "add_one", Message("1")); });
      RPC_CHECK(agent->rpc_sync("w2", "add_one", Message("1")).header() == "2");
    }
    if (rank != 1) agent->shutdown(true, 10s);
    if (rank == 1) std::this_thread::sleep_for(30s);
  });
  EXPECT_TRUE(exited_with(status[0], 0)) << status[0];
  EXPECT_TRUE(exited_with(status[1], 3)) << status[1];
  EXPECT_TRUE(exited_with(status[2], 0)) << status[2];
}

TEST(RpcAgent, CallerDiesCalleeCarriesOn) {
  std::string path = temp_path();
  auto status = run_processes(2, 60s, [&](int rank) {
    auto agent = join(path, rank, 2);
    auto started = std::make_shared<std::atomic<bool>>(false);
    agent->register_function("slow", [started](const CallContext&, Message) {
      *started = true;
      std::this_thread::sleep_for(300ms);
      return Message("done");
    });
    if (rank == 0) {
      agent->rpc_async("w1", "slow", {});
      std::this_thread::sleep_for(50ms);
      ::kill(::getpid(), SIGKILL);
    }
    for (int i = 0; i < 2000 && !started->load(); ++i) std::this_thread::sleep_for(5ms);
    RPC_CHECK(started->load());
    // The reply to the dead caller is dropped; shutdown counts it as gone.
    agent->shutdown(true, 10s);
    RPC_CHECK(agent->is_shut_down());
  });
  EXPECT_TRUE(WIFSIGNALED(status[0]) && WTERMSIG(status[0]) == SIGKILL) << status[0];
  EXPECT_TRUE(exited_with(status[1], 0)) << status[1];
}

TEST(RpcAgent, ShutdownTerminatesWithDeadOrStuckPeers) {
  std::string path = temp_path();
  auto status = run_processes(3, 60s, [&](int rank) {
    auto agent = join(path, rank, 3);
    if (rank == 2) ::_exit(0);  // gone without a shutdown
    if (rank == 1) {
      // Alive but never shutting down within w0's timeout.
      std::this_thread::sleep_for(3s);
      agent->shutdown(false);
      return;
    }
    auto start = Clock::now();
    std::string e = expect_throw<TimeoutError>([&] { agent->shutdown(true, 500ms); });
    RPC_CHECK(e.find("'w1'") != std::string::npos && e.find("'w2'") == std::string::npos, "{}", e);
    RPC_CHECK(Clock::now() - start < 2900ms, "shutdown waited for w1 past its timeout");
    RPC_CHECK(agent->is_shut_down());
  });
  expect_all_ok(status);
}

TEST(RpcAgent, CallsAfterShutdownThrow) {
  std::string path = temp_path();
  auto status = run_processes(2, 60s, [&](int rank) {
    auto agent = join(path, rank, 2);
    agent->register_function("add_one", add_one);
    RPC_CHECK(agent->rpc_sync(worker(1 - rank), "add_one", Message("5")).header() == "6");
    agent->shutdown();
    agent->shutdown();  // idempotent
    std::string e = expect_throw<Error>([&] { agent->rpc_sync(worker(1 - rank), "add_one", {}); });
    RPC_CHECK(e.find("shut down") != std::string::npos, "{}", e);
    expect_throw<Error>([&] { agent->remote(worker(1 - rank), "add_one", {}); });
  });
  expect_all_ok(status);
}

}  // namespace
}  // namespace cohort::rpc

namespace cohort::rpc {
namespace {

// Not a check, a measurement (run with --gtest_also_run_disabled_tests):
// small-call latency and large-payload bandwidth between two processes.
TEST(RpcAgent, DISABLED_Measure) {
  std::string path = temp_path();
  auto status = run_processes(2, 120s, [&](int rank) {
    auto agent = join(path, rank, 2);
    agent->register_function("echo", echo);
    agent->register_function("sink", [](const CallContext&, Message) { return Message(); });
    if (rank == 0) {
      for (int i = 0; i < 100; ++i) agent->rpc_sync("w1", "sink", Message("x"));
      int n = 3000;
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) agent->rpc_sync("w1", "sink", Message("x"));
      double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
      auto big = std::make_shared<std::vector<uint8_t>>(8u << 20, 7);
      int reps = 30;
      t0 = Clock::now();
      for (int i = 0; i < reps; ++i) {
        Message m;
        m.add_buffer(big->data(), big->size(), big);
        agent->rpc_sync("w1", "sink", std::move(m));
      }
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("[%s] small sync call: %.1f us; 8 MiB one way: %.2f GB/s\n",
                  agent->options().force_tcp ? "tcp" : "unix", us,
                  reps * double(big->size()) / s / 1e9);
    }
    agent->shutdown();
  });
  expect_all_ok(status);
}

}  // namespace
}  // namespace cohort::rpc
