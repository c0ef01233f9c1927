// Transport tests without the collectives: shared-memory rings (wrap-around,
// partial writes, peeking), endpoints connecting shm and TCP pairs, strays
// without the token, dead peers and abort frames on the control connections.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/transport/endpoint.h"
#include "cohort/transport/peer_address.h"
#include "cohort/transport/shm_pair.h"

namespace cohort::transport {
namespace {

using namespace std::chrono_literals;

TEST(ShmPair, StreamSurvivesWrapAroundAndPartialTransfers) {
  ShmSegment s0 = ShmSegment::create(0, 2, 4096);
  ShmSegment s1 = ShmSegment::create(1, 2, 4096);
  ShmPair p0(0, 1, s0, s1);  // rank 0's end
  ShmPair p1(1, 0, s1, s0);  // rank 1's end
  const size_t total = 1 << 20;
  std::vector<uint8_t> src(total), dst(total);
  for (size_t i = 0; i < total; ++i) src[i] = static_cast<uint8_t>(i * 31 + (i >> 9));
  std::thread producer([&] {
    std::mt19937 rng(1);
    size_t off = 0;
    while (off < total) {
      size_t n = std::min<size_t>(total - off, 1 + rng() % 5000);
      size_t w = p0.write_some(src.data() + off, n);
      off += w;
      if (w == 0) std::this_thread::yield();
    }
  });
  std::mt19937 rng(2);
  size_t off = 0;
  while (off < total) {
    size_t got;
    if (rng() % 2 == 0) {
      got = p1.read_some(dst.data() + off, std::min<size_t>(total - off, 1 + rng() % 7000));
    } else {
      auto v = p1.peek();
      got = std::min<size_t>(v.size(), total - off);
      if (got > 0) std::memcpy(dst.data() + off, v.data(), got);
      p1.consume(got);
    }
    off += got;
    if (got == 0) std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(src, dst);
  EXPECT_FALSE(p1.readable());
  EXPECT_TRUE(p0.writable());
}

TEST(ShmPair, PeekSeesBytesPublishedAfterAnEarlierPeek) {
  // A reducer peeks half an element, then waits for the rest: the second
  // peek must see the producer's later bytes (a stale view used to stall).
  ShmSegment s0 = ShmSegment::create(0, 2, 4096);
  ShmSegment s1 = ShmSegment::create(1, 2, 4096);
  ShmPair p0(0, 1, s0, s1);
  ShmPair p1(1, 0, s1, s0);
  uint64_t v = 0x1122334455667788ull;
  ASSERT_EQ(p0.write_some(&v, 4), 4u);
  EXPECT_EQ(p1.peek().size(), 4u);
  ASSERT_EQ(p0.write_some(reinterpret_cast<char*>(&v) + 4, 4), 4u);
  auto s = p1.peek();
  ASSERT_EQ(s.size(), 8u);
  uint64_t got;
  std::memcpy(&got, s.data(), 8);
  EXPECT_EQ(got, v);
}

TEST(ShmPair, FullRingTakesNoMore) {
  ShmSegment s0 = ShmSegment::create(0, 2, 4096);
  ShmSegment s1 = ShmSegment::create(1, 2, 4096);
  ShmPair p0(0, 1, s0, s1);
  std::vector<char> big(10000, 'x');
  EXPECT_EQ(p0.write_some(big.data(), big.size()), 4096u);
  EXPECT_EQ(p0.write_some(big.data(), 1), 0u);
  EXPECT_FALSE(p0.writable());
}

// Builds n contexts on threads; force_tcp[r] per rank.
std::vector<std::unique_ptr<Context>> connect_all(
    int n, std::vector<bool> force_tcp,
    std::function<void(int, const std::string&)> before_connect = nullptr) {
  std::vector<std::unique_ptr<Endpoint>> eps;
  std::vector<std::string> addrs;
  for (int r = 0; r < n; ++r) {
    eps.push_back(
        std::make_unique<Endpoint>(r, n, EndpointOptions{force_tcp[static_cast<size_t>(r)]}));
    addrs.push_back(eps.back()->address());
  }
  if (before_connect) before_connect(0, addrs[0]);
  std::vector<std::unique_ptr<Context>> ctx(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  auto deadline = Clock::now() + 20s;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      ctx[static_cast<size_t>(r)] = eps[static_cast<size_t>(r)]->connect(addrs, deadline);
    });
  }
  for (auto& t : ts) t.join();
  return ctx;
}

void exchange_byte(Context& a, Context& b) {
  uint8_t x = static_cast<uint8_t>(a.rank() * 16 + b.rank()), y = 0;
  while (a.pair(b.rank())->write_some(&x, 1) == 0) {
  }
  auto deadline = Clock::now() + 10s;
  while (b.pair(a.rank())->read_some(&y, 1) == 0) {
    Want w{b.pair(a.rank()), false};
    b.wait({&w, 1}, deadline);
    ASSERT_LT(Clock::now(), deadline);
  }
  EXPECT_EQ(x, y);
}

TEST(Endpoint, ChoosesSharedMemoryOnOneHostUnlessEitherSideForcesTcp) {
  auto ctx = connect_all(3, {false, false, true});
  EXPECT_EQ(ctx[0]->pair(1)->kind(), "shm");
  EXPECT_EQ(ctx[1]->pair(0)->kind(), "shm");
  EXPECT_EQ(ctx[0]->pair(2)->kind(), "tcp");
  EXPECT_EQ(ctx[2]->pair(0)->kind(), "tcp");
  EXPECT_EQ(ctx[1]->pair(2)->kind(), "tcp");
  EXPECT_EQ(ctx[0]->local_ranks(), 3);
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      if (a != b) exchange_byte(*ctx[static_cast<size_t>(a)], *ctx[static_cast<size_t>(b)]);
    }
  }
}

TEST(Endpoint, DropsAConnectionWithoutTheToken) {
  std::thread stray;
  auto ctx = connect_all(2, {true, true}, [&](int, const std::string& addr0) {
    const uint16_t port = parse_peer_address(addr0, 0).port;
    stray = std::thread([port] {
      UniqueFd fd = connect_tcp("127.0.0.1", port, Clock::now() + 5s, "stray");
      char junk[24] = "not a cohort rank";
      write_all(fd.get(), junk, sizeof(junk), Clock::now() + 5s, "stray");
      std::this_thread::sleep_for(200ms);
    });
    std::this_thread::sleep_for(50ms);  // let the stray arrive first
  });
  stray.join();
  exchange_byte(*ctx[0], *ctx[1]);
  exchange_byte(*ctx[1], *ctx[0]);
}

TEST(Context, AbortFrameReachesPeersWithItsKind) {
  auto ctx = connect_all(2, {false, false});
  ctx[1]->abort(AbortKind::kMismatch, "rank 1 saw a mismatch");
  EXPECT_TRUE(ctx[1]->aborted());
  auto deadline = Clock::now() + 10s;
  try {
    while (Clock::now() < deadline) {
      ctx[0]->check_peers();
      std::this_thread::sleep_for(1ms);
    }
    ADD_FAILURE() << "no abort seen";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 saw a mismatch"), std::string::npos);
  }
  // The aborting rank's own waits fail with its reason too.
  EXPECT_THROW(ctx[1]->check_peers(), InvalidArgument);
}

TEST(Context, PeerThatLeftIsNotADeathUntilWaitedOn) {
  auto ctx = connect_all(2, {false, false});
  ctx[1].reset();  // sends "left"
  auto deadline = Clock::now() + 5s;
  while (!ctx[0]->peer_left(1) && Clock::now() < deadline) {
    ctx[0]->check_peers();  // must not throw
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(ctx[0]->peer_left(1));
  Want w{ctx[0]->pair(1), false};
  EXPECT_THROW(ctx[0]->wait({&w, 1}, Clock::now() + 5s), PeerLost);
}

TEST(Context, KilledPeerProcessIsReportedByRank) {
  // Rank 1 lives in a child process that exits without any goodbye.
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  auto send_line = [](int fd, const std::string& s) {
    std::string l = s + "\n";
    ASSERT_EQ(::write(fd, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  };
  auto read_line = [](int fd) {
    std::string s;
    char c;
    while (::read(fd, &c, 1) == 1 && c != '\n') s += c;
    return s;
  };
  pid_t pid = ::fork();
  if (pid == 0) {
    Endpoint ep(1, 2, {});
    std::string mine = ep.address();
    std::string l = mine + "\n";
    if (::write(to_parent[1], l.data(), l.size()) < 0) ::_exit(3);
    std::string theirs;
    char c;
    while (::read(to_child[0], &c, 1) == 1 && c != '\n') theirs += c;
    auto ctx = ep.connect({theirs, mine}, Clock::now() + 10s);
    ::_exit(0);  // no destructors: like a crash
  }
  Endpoint ep(0, 2, {});
  send_line(to_child[1], ep.address());
  std::string child = read_line(to_parent[0]);
  auto ctx = ep.connect({ep.address(), child}, Clock::now() + 10s);
  ::waitpid(pid, nullptr, 0);
  Want w{ctx->pair(1), false};
  try {
    for (int i = 0; i < 100; ++i) ctx->wait({&w, 1}, Clock::now() + 1s);
    ADD_FAILURE() << "no PeerLost";
  } catch (const PeerLost& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) ::close(fd);
}

}  // namespace
}  // namespace cohort::transport
