#include "cohort/transport/network.h"

#include <gtest/gtest.h>

#include <chrono>

#include "cohort/base/error.h"
#include "cohort/transport/endpoint.h"
#include "cohort/transport/peer_address.h"
#include "cohort/transport/socket.h"

namespace cohort::transport {
namespace {

using namespace std::chrono_literals;

TEST(Network, MasterOnLoopbackMeansOneHostOverLoopback) {
  NetworkOptions o;
  o.master_addr = "127.0.0.1";
  o.master_port = 29500;
  EXPECT_EQ(advertised_addresses(o), std::vector<std::string>{"127.0.0.1"});
  EXPECT_TRUE(is_loopback_ip(route_address("localhost", 1)));
}

TEST(Network, MasterElsewhereNeverAdvertisesLoopback) {
  // The route to a non-local address leaves through a real interface (a
  // default route), when this host has one.
  std::vector<std::string> others;
  for (const std::string& e : interface_list())
    if (!is_loopback_ip(e.substr(e.find('=') + 1))) others.push_back(e);
  if (others.empty()) GTEST_SKIP() << "this host has no interface besides loopback";
  NetworkOptions o;
  o.master_addr = others.front().substr(others.front().find('=') + 1);
  std::vector<std::string> ips = advertised_addresses(o);
  ASSERT_FALSE(ips.empty());
  EXPECT_EQ(ips.front(), o.master_addr) << "the route to an own address is that address";
  for (const std::string& ip : ips) EXPECT_FALSE(is_loopback_ip(ip)) << ip;
}

TEST(Network, InterfaceAndAddressOverridesWin) {
  NetworkOptions o;
  o.master_addr = "127.0.0.1";
  o.interface = "lo";
  EXPECT_EQ(advertised_addresses(o), std::vector<std::string>{"127.0.0.1"});
  o.address = "10.9.8.7";
  EXPECT_EQ(advertised_addresses(o), std::vector<std::string>{"10.9.8.7"});
  o.address = "not-an-ip";
  EXPECT_THROW(advertised_addresses(o), InvalidArgument);
}

TEST(Network, UnknownInterfaceIsNamedWithTheOnesThatExist) {
  try {
    interface_address("nosuchif0");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'nosuchif0'"), std::string::npos) << m;
    EXPECT_NE(m.find("lo (127.0.0.1)"), std::string::npos) << m;
  }
}

TEST(PeerAddress, RoundTripsAndRejectsGarbageNamingTheRank) {
  PeerAddress a;
  a.rank = 3;
  a.host = "h";
  a.boot = "b";
  a.netns = "net:[1]";
  a.ips = {"10.0.0.1", "192.168.1.2"};
  a.port = 4242;
  a.token = 99;
  a.force_tcp = false;
  a.shm = "/cohort-x";
  a.pid = 12;
  a.probe = 34;
  PeerAddress b = parse_peer_address(format_peer_address(a), 3);
  EXPECT_EQ(b.ips, a.ips);
  EXPECT_EQ(b.port, 4242);
  EXPECT_EQ(b.netns, "net:[1]");
  EXPECT_FALSE(b.force_tcp);
  for (std::string bad :
       {std::string(""), std::string("cohort1 3 h b 1.2.3.4 5 6 1 - 7 8"),
        format_peer_address(a) + " extra", std::string("cohort2 3 h b n ips 0 1 1 - 1 1")}) {
    try {
      parse_peer_address(bad, 3);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_peer_address(format_peer_address(a), 2), InvalidArgument);
}

TEST(PeerAddress, SameHostNeedsTheSameNetworkNamespace) {
  PeerAddress a, b;
  a.rank = 0;
  b.rank = 1;
  a.host = b.host = "node";
  a.boot = b.boot = "boot";
  a.netns = "net:[1]";
  b.netns = "net:[2]";
  a.force_tcp = b.force_tcp = false;
  a.shm = "/a";
  b.shm = "/b";
  EXPECT_FALSE(same_host(a, b));
  EXPECT_FALSE(shm_candidate(a, b));
  b.netns = a.netns;
  EXPECT_TRUE(same_host(a, b));
  EXPECT_TRUE(shm_candidate(a, b));
  b.force_tcp = true;
  EXPECT_FALSE(shm_candidate(a, b));
}

TEST(PeerAddress, HelloFromAnotherJobIsRejectedSayingWhy) {
  Hello h{kHelloMagic, 2, kControlChannel, 0, 7};
  std::string why;
  EXPECT_TRUE(hello_valid(h, 1, 4, 7, &why));
  EXPECT_FALSE(hello_valid(h, 1, 4, 8, &why));
  EXPECT_NE(why.find("COHORT_TOKEN"), std::string::npos) << why;
  h.rank = 1;
  EXPECT_FALSE(hello_valid(Hello{kHelloMagic, 1, 0, 0, 7}, 1, 4, 7, &why));
  EXPECT_FALSE(hello_valid(Hello{0, 2, 0, 0, 7}, 1, 4, 7, &why));
}

TEST(Endpoint, MissingPeerIsReportedWhileWaitingAndNamedAtTheConnectTimeout) {
  EndpointOptions o;
  o.force_tcp = true;
  o.network.master_addr = "127.0.0.1";
  o.network.connect_timeout = 1s;
  o.network.report_interval = 200ms;
  Endpoint e0(0, 2, o);
  PeerAddress ghost = parse_peer_address(e0.address(), 0);
  ghost.rank = 1;  // published, never connects
  ::testing::internal::CaptureStderr();
  try {
    e0.connect({e0.address(), format_peer_address(ghost)}, Clock::now() + 60s);
    ::testing::internal::GetCapturedStderr();
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("rank 0 still waiting after"), std::string::npos) << log;
    EXPECT_NE(log.find("ranks 1 have not connected"), std::string::npos) << log;
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 0 timed out (connect time-out): ranks 1 have not connected to port " +
                     std::to_string(ghost.port) + " of 127.0.0.1"),
              std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace cohort::transport
