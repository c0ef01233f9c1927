#include "cohort/rendezvous/tcp_store.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/rendezvous/tcp_store_protocol.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "cohort/rendezvous/token.h"
#include "cohort/transport/socket.h"

namespace cohort::rendezvous {
namespace {

using namespace std::chrono_literals;

TcpStoreOptions client_of(uint16_t port, std::string token) {
  TcpStoreOptions o;
  o.port = port;
  o.token = std::move(token);
  o.timeout = 10s;
  return o;
}

std::unique_ptr<TcpStoreServer> make_server(const std::string& token) {
  TcpStoreServerOptions so;
  so.bind_host = "127.0.0.1";
  so.token = token;
  return std::make_unique<TcpStoreServer>(so);
}

TEST(TcpStore, PortZeroPicksAFreePort) {
  auto server = make_server("t");
  EXPECT_NE(server->port(), 0);
  TcpStore client(client_of(server->port(), "t"));
  EXPECT_EQ(client.port(), server->port());
  client.set("k", std::string("v"));
  EXPECT_EQ(client.get_string("k"), "v");
}

TEST(TcpStore, WrongOrMissingTokenIsRefused) {
  auto server = make_server("right");
  TcpStore good(client_of(server->port(), "right"));
  good.set("secret", std::string("s"));
  try {
    TcpStore bad(client_of(server->port(), "wrong"));
    FAIL() << "a client with the wrong token was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("wrong job token"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TcpStore(client_of(server->port(), "")), IoError);
  EXPECT_EQ(server->num_refused(), 2);
  EXPECT_EQ(server->num_clients(), 1);
}

// Sends raw bytes to the server and returns what comes back before it closes.
std::vector<uint8_t> raw_exchange(uint16_t port, const std::vector<uint8_t>& bytes) {
  auto deadline = transport::Clock::now() + 10s;
  UniqueFd fd = transport::connect_tcp("127.0.0.1", port, deadline, "raw");
  transport::write_all(fd.get(), bytes.data(), bytes.size(), deadline, "raw");
  timeval tv{10, 0};  // a server that never closes fails the test instead of hanging it
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::vector<uint8_t> got;
  uint8_t buf[256];
  while (true) {
    ssize_t r = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (r <= 0) break;  // closed by the server
    got.insert(got.end(), buf, buf + r);
  }
  return got;
}

TEST(TcpStore, RefusedConnectionCannotReadOrWriteKeys) {
  auto server = make_server("right");
  TcpStore good(client_of(server->port(), "right"));
  good.set("secret", std::string("s"));

  // A wrong token followed at once by a set and a get: refused, closed, nothing done.
  auto hello =
      std::move(proto::Encoder().u32(proto::kMagic).u32(proto::kVersion).str("wrong")).finish();
  auto set =
      std::move(proto::Encoder().u8(static_cast<uint8_t>(proto::Op::kSet)).str("injected").str("x"))
          .finish();
  auto get =
      std::move(proto::Encoder().u8(static_cast<uint8_t>(proto::Op::kGet)).str("secret").u64(1000))
          .finish();
  std::vector<uint8_t> stream = hello;
  stream.insert(stream.end(), set.begin(), set.end());
  stream.insert(stream.end(), get.begin(), get.end());
  auto reply = raw_exchange(server->port(), stream);
  ASSERT_GE(reply.size(), 5u);
  EXPECT_EQ(reply[4], static_cast<uint8_t>(proto::Status::kRefused));
  // The reply is the refusal alone: one frame.
  EXPECT_EQ(proto::read_u32_le(reply.data()) + 4, reply.size());

  // A request with no handshake at all: dropped without a reply.
  EXPECT_TRUE(raw_exchange(server->port(), get).empty());

  EXPECT_FALSE(good.check({"injected"}));
  EXPECT_EQ(good.get_string("secret"), "s");
}

TEST(TcpStore, SilentOrOversizedConnectionsAreDropped) {
  TcpStoreServerOptions so;
  so.bind_host = "127.0.0.1";
  so.token = "t";
  so.handshake_timeout = 100ms;
  TcpStoreServer server(so);
  // Says nothing: closed once the handshake timeout passes.
  EXPECT_TRUE(raw_exchange(server.port(), {}).empty());
  // Announces a 1 GiB frame before the handshake: closed without a reply.
  EXPECT_TRUE(raw_exchange(server.port(), {0, 0, 0, 0x40, 1, 2, 3}).empty());
  TcpStore good(client_of(server.port(), "t"));
  good.set("still", std::string("serving"));
  EXPECT_EQ(good.get_string("still"), "serving");
}

TEST(TcpStore, TokenComesFromEnvironment) {
  ::setenv(kTokenEnv, "env-token", 1);
  TcpStoreOptions so;
  so.is_server = true;  // server and its own client both read COHORT_TOKEN
  TcpStore server(so);
  TcpStore client(client_of(server.port(), "env-token"));
  client.set("a", std::string("1"));
  EXPECT_EQ(server.get_string("a"), "1");
  EXPECT_THROW(TcpStore(client_of(server.port(), "other")), IoError);
  ::unsetenv(kTokenEnv);
}

TEST(TcpStore, ServerGoneIsPeerLost) {
  auto server = make_server("t");
  TcpStore client(client_of(server->port(), "t"));
  client.set("a", std::string("1"));
  std::thread killer([&] {
    std::this_thread::sleep_for(50ms);
    server.reset();
  });
  EXPECT_THROW(client.wait({"never"}, 30s), PeerLost);
  killer.join();
  EXPECT_THROW(client.get("a"), PeerLost);
}

TEST(TcpStore, ClientStartedBeforeServerConnectsWhenItComes) {
  uint16_t port = 0;
  { UniqueFd probe = transport::listen_tcp("127.0.0.1", 0, &port); }  // a free port, released
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(100ms);
    TcpStoreServerOptions so;
    so.bind_host = "127.0.0.1";
    so.port = port;
    so.token = "t";
    server = std::make_unique<TcpStoreServer>(so);
  });
  TcpStore client(client_of(port, "t"));
  starter.join();
  client.set("x", std::string("y"));
  EXPECT_EQ(client.get_string("x"), "y");
}

TEST(TcpStore, ConnectTimesOutWithoutServer) {
  uint16_t port = 0;
  { UniqueFd probe = transport::listen_tcp("127.0.0.1", 0, &port); }
  TcpStoreOptions o = client_of(port, "t");
  o.timeout = 200ms;
  EXPECT_THROW(TcpStore store(o), TimeoutError);
}

TEST(TcpStore, ConcurrentWaiterDoesNotBlockOtherCalls) {
  auto server = make_server("t");
  TcpStore client(client_of(server->port(), "t"));
  std::thread waiter([&] { client.wait({"go"}, 30s); });
  std::this_thread::sleep_for(20ms);
  client.set("go", std::string("1"));  // would deadlock if calls were serialized
  waiter.join();
  EXPECT_TRUE(client.check({"go"}));
}

TEST(TcpStore, ManyProcessesMeetAtABarrier) {
  auto server = make_server("t");
  constexpr int kProcs = 6;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        TcpStore s(client_of(server->port(), "t"));
        s.set("rank" + std::to_string(p), std::to_string(p));
        if (s.add("arrived", 1) == kProcs) s.set("all", std::string("1"));
        s.wait({"all"});
        for (int q = 0; q < kProcs; ++q) {
          if (s.get_string("rank" + std::to_string(q)) != std::to_string(q)) code = 2;
        }
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  TcpStore s(client_of(server->port(), "t"));
  EXPECT_EQ(s.add("arrived", 0), kProcs);
  EXPECT_EQ(s.num_keys(), kProcs + 2);
}

int count_threads() {
  int n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// A thread that earlier tests joined can still be listed for a moment, since
// join returns before the thread has fully exited (for milliseconds under
// qemu-user): wait until the count holds still.
int settled_thread_count() {
  int n = count_threads();
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(10ms);
    int m = count_threads();
    if (m == n) return n;
    n = m;
  }
  return n;
}

TEST(TcpStore, OneServerThreadServesManyClients) {
  // A runtime may start threads of its own with the process's first thread
  // (ThreadSanitizer starts its background thread then): start and join one
  // first, so that the counts below see only the server's.
  std::thread([] {}).join();
  int before = settled_thread_count();
  auto server = make_server("t");
  EXPECT_EQ(count_threads(), before + 1);
  constexpr int kClients = 64;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<TcpStore>(client_of(server->port(), "t")));
  }
  EXPECT_EQ(server->num_clients(), kClients);
  EXPECT_EQ(count_threads(), before + 1);  // no thread per client
  // Every client parks a wait at once; one set releases them all.
  std::vector<std::thread> waiters;
  std::atomic<int> released{0};
  for (int i = 0; i < kClients; ++i) {
    waiters.emplace_back([&, i] {
      clients[static_cast<size_t>(i)]->add("parked", 1);
      clients[static_cast<size_t>(i)]->wait({"release"}, 30s);
      released.fetch_add(1);
    });
  }
  clients[0]->wait({"parked"}, 30s);
  while (clients[0]->add("parked", 0) < kClients) std::this_thread::sleep_for(1ms);
  clients[0]->set("release", std::string("go"));
  for (auto& t : waiters) t.join();
  EXPECT_EQ(released.load(), kClients);
}

TEST(TcpStore, GeneratedTokensDiffer) {
  std::string a = generate_token(), b = generate_token();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(tokens_equal(a, a));
  EXPECT_FALSE(tokens_equal(a, b));
  EXPECT_FALSE(tokens_equal(a, a.substr(0, 31)));
}

}  // namespace
}  // namespace cohort::rendezvous
