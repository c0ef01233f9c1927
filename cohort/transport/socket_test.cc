#include "cohort/transport/socket.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "cohort/base/error.h"

namespace cohort::transport {
namespace {

using namespace std::chrono_literals;

// Why this host cannot listen on IPv6 loopback (no IPv6, or ::1 not
// configured), or nullopt when it can.
std::optional<std::string> no_ipv6_loopback() {
  UniqueFd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return std::string("this host has no IPv6 (socket(AF_INET6) failed)");
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    return std::string("IPv6 loopback ::1 is not configured on this host");
  return std::nullopt;
}

#define SKIP_WITHOUT_IPV6() \
  if (auto why = no_ipv6_loopback()) GTEST_SKIP() << "IPv6 part skipped: " << *why

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A listener on host, a client connected to `connect_to` and the accepted end;
// a message each way.
void expect_round_trip(const std::string& host, const std::string& connect_to) {
  uint16_t port = 0;
  UniqueFd listener = listen_tcp(host, 0, &port);
  ASSERT_NE(port, 0);
  const auto deadline = Clock::now() + 5s;
  UniqueFd client = connect_tcp(connect_to, port, deadline, "test connect");
  UniqueFd server = accept_tcp(listener.get(), deadline, "test accept");
  const char hello[] = "hello";
  write_all(client.get(), hello, sizeof(hello), deadline, "test write");
  char got[sizeof(hello)] = {};
  read_all(server.get(), got, sizeof(got), deadline, "test read");
  EXPECT_STREQ(got, hello);
  write_all(server.get(), "!", 1, deadline, "test write");
  char c = 0;
  read_all(client.get(), &c, 1, deadline, "test read");
  EXPECT_EQ(c, '!');
}

TEST(Socket, IPv4LoopbackRoundTrip) { expect_round_trip("127.0.0.1", "127.0.0.1"); }

TEST(Socket, IPv6LoopbackRoundTrip) {
  SKIP_WITHOUT_IPV6();
  expect_round_trip("::1", "::1");
}

TEST(Socket, ListenerOnEveryInterfaceServesBothFamilies) {
  expect_round_trip("", "127.0.0.1");
  SKIP_WITHOUT_IPV6();
  expect_round_trip("", "::1");
  expect_round_trip("*", "localhost");
}

TEST(Socket, ReadWaitsInOnePollUntilTheDeadline) {
  uint16_t port = 0;
  UniqueFd listener = listen_tcp("127.0.0.1", 0, &port);
  UniqueFd client = connect_tcp("127.0.0.1", port, Clock::now() + 5s, "test connect");
  UniqueFd server = accept_tcp(listener.get(), Clock::now() + 5s, "test accept");
  char c = 0;
  const auto start = Clock::now();
  EXPECT_THROW(read_all(server.get(), &c, 1, start + 300ms, "quiet peer"), TimeoutError);
  const double took = seconds_since(start);
  // Not before the deadline; the upper bound only catches a wait that goes
  // on past it (a loaded host may add scheduling delay, so it is generous).
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 1.3);
}

TEST(Socket, PassedDeadlineStillTakesWhatIsThereButWaitsForNothing) {
  uint16_t port = 0;
  UniqueFd listener = listen_tcp("127.0.0.1", 0, &port);
  UniqueFd client = connect_tcp("127.0.0.1", port, Clock::now() + 5s, "test connect");
  UniqueFd server = accept_tcp(listener.get(), Clock::now() + 5s, "test accept");
  write_all(client.get(), "x", 1, Clock::now() + 5s, "test write");
  std::this_thread::sleep_for(50ms);  // delivered over loopback
  char c = 0;
  const auto past = Clock::now() - 1s;
  read_all(server.get(), &c, 1, past, "ready bytes");
  EXPECT_EQ(c, 'x');
  const auto start = Clock::now();
  EXPECT_THROW(read_all(server.get(), &c, 1, past, "no bytes"), TimeoutError);
  EXPECT_THROW(accept_tcp(listener.get(), past, "no client"), TimeoutError);
  EXPECT_LT(seconds_since(start), 1.0);  // no wait: far under any time-out slice
}

TEST(Socket, AcceptTimesOutAtTheDeadlineNamingTheOperation) {
  uint16_t port = 0;
  UniqueFd listener = listen_tcp("", 0, &port);
  const auto start = Clock::now();
  try {
    accept_tcp(listener.get(), start + 200ms, "test accept");
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("test accept"), std::string::npos) << e.what();
  }
  EXPECT_GE(seconds_since(start), 0.2);
  EXPECT_LT(seconds_since(start), 1.2);
}

TEST(Socket, ConnectTimeoutNamesTheAddressAndTheLastError) {
  uint16_t port = 0;
  { UniqueFd l = listen_tcp(&port); }  // a port nobody listens on any more
  try {
    connect_tcp("127.0.0.1", port, Clock::now() + 300ms, "test connect");
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
    EXPECT_NE(m.find("Connection refused"), std::string::npos) << m;
  }
}

// Refused attempts are retried with back-off (capped at 100 ms) and the last
// one ends at the deadline, not a back-off step past it.
void expect_refused_until_the_deadline(const std::string& host, const std::string& named) {
  uint16_t port = 0;
  { UniqueFd l = listen_tcp(host, 0, &port); }
  ConnectOptions o;
  o.what = "test connect";
  o.peer = "the test server";
  const auto start = Clock::now();
  try {
    connect_tcp(host, port, start + 500ms, o);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("test connect: could not connect to the test server at " + named + ":" +
                     std::to_string(port)),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("Connection refused"), std::string::npos) << m;
  }
  EXPECT_GE(seconds_since(start), 0.5);
  EXPECT_LT(seconds_since(start), 1.5);
}

TEST(Socket, RefusedConnectBacksOffUntilTheDeadlineIPv4) {
  expect_refused_until_the_deadline("127.0.0.1", "127.0.0.1");
}

TEST(Socket, RefusedConnectBacksOffUntilTheDeadlineIPv6) {
  SKIP_WITHOUT_IPV6();
  expect_refused_until_the_deadline("::1", "[::1]");
}

TEST(Socket, ConnectRetriesUntilTheServerComesUp) {
  uint16_t port = 0;
  { UniqueFd l = listen_tcp("127.0.0.1", 0, &port); }
  std::thread late([port] {
    std::this_thread::sleep_for(300ms);
    UniqueFd l = listen_tcp("127.0.0.1", port, nullptr);
    (void)accept_tcp(l.get(), Clock::now() + 5s, "late accept");
  });
  const auto start = Clock::now();
  UniqueFd fd = connect_tcp("127.0.0.1", port, start + 5s, "test connect");
  EXPECT_TRUE(fd.valid());
  // Found soon after the server listens, not at the 5 s deadline (the
  // bound is generous for a loaded host).
  EXPECT_LT(seconds_since(start), 2.0);
  late.join();
}

TEST(Socket, ClosedPeerIsPeerLost) {
  uint16_t port = 0;
  UniqueFd listener = listen_tcp("127.0.0.1", 0, &port);
  UniqueFd client = connect_tcp("127.0.0.1", port, Clock::now() + 5s, "test connect");
  UniqueFd server = accept_tcp(listener.get(), Clock::now() + 5s, "test accept");
  client.reset();
  char c = 0;
  EXPECT_THROW(read_all(server.get(), &c, 1, Clock::now() + 5s, "test read"), PeerLost);
}

// A signal (a profiler's, a debugger's) interrupting the wait is not an error
// and does not shorten it.
TEST(Socket, InterruptedWaitGoesOn) {
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  sa.sa_flags = 0;  // no SA_RESTART: poll returns EINTR
  struct sigaction old {};
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
  uint16_t port = 0;
  UniqueFd listener = listen_tcp("127.0.0.1", 0, &port);
  UniqueFd client = connect_tcp("127.0.0.1", port, Clock::now() + 5s, "test connect");
  UniqueFd server = accept_tcp(listener.get(), Clock::now() + 5s, "test accept");
  std::atomic<bool> done{false};
  char got = 0;
  std::exception_ptr error;
  std::thread reader([&] {
    try {
      read_all(server.get(), &got, 1, Clock::now() + 5s, "interrupted read");
    } catch (...) {
      error = std::current_exception();
    }
    done = true;
  });
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(20ms);
    ::pthread_kill(reader.native_handle(), SIGUSR1);
  }
  EXPECT_FALSE(done.load());
  write_all(client.get(), "y", 1, Clock::now() + 5s, "test write");
  reader.join();
  ::sigaction(SIGUSR1, &old, nullptr);
  EXPECT_FALSE(error);
  EXPECT_EQ(got, 'y');
}

TEST(Socket, PollTimeoutRoundsUpAndHonoursTheCap) {
  EXPECT_EQ(poll_timeout_ms(Clock::now() - 1s), 0);
  EXPECT_GE(poll_timeout_ms(Clock::now() + 1500us), 1);
  EXPECT_EQ(poll_timeout_ms(Clock::now() + 10s, 100), 100);
  EXPECT_GT(poll_timeout_ms(Clock::now() + 10s), 9000);
}

TEST(Socket, LoopbackServersBindTheirFamilysLoopback) {
  EXPECT_TRUE(is_loopback("localhost"));
  EXPECT_TRUE(is_loopback("127.0.0.2"));
  EXPECT_TRUE(is_loopback("::1"));
  EXPECT_FALSE(is_loopback("10.0.0.1"));
  EXPECT_EQ(bind_host_for("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(bind_host_for("localhost"), "127.0.0.1");
  EXPECT_EQ(bind_host_for("::1"), "::1");
  EXPECT_EQ(bind_host_for("10.0.0.1"), "");
}

}  // namespace
}  // namespace cohort::transport
