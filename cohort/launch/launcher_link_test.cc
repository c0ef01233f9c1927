#include "cohort/launch/launcher_link.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "cohort/base/error.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

LauncherLinkOptions node(int rank, int nnodes = 2, std::string token = "job-token") {
  LauncherLinkOptions o;
  o.nnodes = nnodes;
  o.node_rank = rank;
  o.token = std::move(token);
  o.host = "host" + std::to_string(rank);
  o.address = "10.0.0." + std::to_string(rank + 1);
  o.pid = 4000 + rank;
  return o;
}

std::unique_ptr<LauncherLink> link_to(const LauncherLink& node0, LauncherLinkOptions o) {
  return std::make_unique<LauncherLink>(std::move(o), "127.0.0.1", node0.port(),
                                        Clock::now() + 20s);
}

// Waits (hang guard only) until the link has lost someone.
std::string wait_lost(const LauncherLink& link) {
  const auto until = Clock::now() + 20s;
  while (Clock::now() < until) {
    if (auto lost = link.lost()) return *lost;
    std::this_thread::sleep_for(10ms);
  }
  return "<nothing lost>";
}

TEST(LauncherLink, NodeWhoseLauncherEndsWithoutGoodbyeIsNamedAsDied) {
  LauncherLink node0(node(0), "127.0.0.1");
  auto node1 = link_to(node0, node(1));
  EXPECT_TRUE(node0.linked(1));
  EXPECT_TRUE(node1->linked(0));
  node1.reset();  // as a killed launcher: its socket closes, nothing said
  EXPECT_EQ(wait_lost(node0),
            "node 1's launcher (pid 4001 on host host1, address 10.0.0.2) died: its link to node "
            "0 closed without a goodbye");
  EXPECT_TRUE(node0.is_lost(1));
}

TEST(LauncherLink, Node0WhoseLauncherDiesIsNamedByTheOthers) {
  auto node0 = std::make_unique<LauncherLink>(node(0), "127.0.0.1");
  auto node1 = link_to(*node0, node(1));
  node0.reset();
  EXPECT_EQ(wait_lost(*node1),
            "node 0's launcher (pid 4000 on host host0, address 10.0.0.1) died: its link to node "
            "1 closed without a goodbye");
  EXPECT_TRUE(node1->is_lost(0));
}

TEST(LauncherLink, GoodbyeIsNotALoss) {
  LauncherLink node0(node(0, 3), "127.0.0.1");
  auto node1 = link_to(node0, node(1, 3));
  auto node2 = link_to(node0, node(2, 3));
  node1->leave();
  node1.reset();
  node2.reset();  // after node 1 left: node 0 has read its goodbye by the time this is lost
  EXPECT_NE(wait_lost(node0).find("node 2's launcher"), std::string::npos);
  EXPECT_FALSE(node0.is_lost(1));
}

TEST(LauncherLink, SilentLauncherIsLostAfterTheSilenceLimit) {
  LauncherLinkOptions o0 = node(0);
  o0.silence_limit = 300ms;
  LauncherLink node0(o0, "127.0.0.1");
  LauncherLinkOptions o1 = node(1);
  o1.heartbeat = std::chrono::hours(1);  // says nothing after its hello (a stopped launcher)
  auto node1 = link_to(node0, o1);
  EXPECT_EQ(wait_lost(node0),
            "lost node 1's launcher (pid 4001 on host host1, address 10.0.0.2): node 0 heard "
            "nothing from it for 300 ms (the link is cut, its host is down or the launcher is "
            "stopped)");
}

TEST(LauncherLink, LauncherOfAnotherJobIsRefusedNamingTheToken) {
  LauncherLink node0(node(0), "127.0.0.1");
  try {
    link_to(node0, node(1, 2, "other-token"));
    FAIL() << "a launcher with another token was linked";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("node 1 could not link to node 0's launcher at "
                                         "127.0.0.1:" +
                                         std::to_string(node0.port()) +
                                         ": it refused: holds another COHORT_TOKEN"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(node0.linked(1));
  EXPECT_FALSE(node0.lost().has_value());
}

TEST(LauncherLink, SecondLauncherClaimingALinkedNodeIsRefused) {
  LauncherLink node0(node(0), "127.0.0.1");
  auto node1 = link_to(node0, node(1));
  EXPECT_THROW(link_to(node0, node(1)), IoError);
  EXPECT_FALSE(node0.lost().has_value());
}

}  // namespace
}  // namespace cohort::launch
