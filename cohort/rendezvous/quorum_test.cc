// The quorum service: the rule (QuorumState, with a fake clock) and the TCP
// store server answering real clients on threads: a quorum forms when every
// live replica asked, without a replica whose connection closed or whose
// heartbeats stopped, after the join timeout with whoever asked, and with a
// new group epoch when the members change or one reports a failed step.
#include "cohort/rendezvous/quorum.h"

#include <gtest/gtest.h>

#include <thread>

#include "cohort/base/error.h"
#include "cohort/rendezvous/tcp_store.h"
#include "cohort/rendezvous/tcp_store_server.h"

namespace cohort::rendezvous {
namespace {

using namespace std::chrono_literals;
using Clock = QuorumState::Clock;

QuorumRequest req(const std::string& id, int64_t step, bool failed = false) {
  return {.id = id,
          .step = step,
          .last_step_failed = failed,
          .min_replicas = 1,
          .join_timeout = 500ms,
          .heartbeat_timeout = 1000ms};
}

std::vector<std::string> ids(const Quorum& q) {
  std::vector<std::string> out;
  for (const QuorumMember& m : q.members) out.push_back(m.id);
  return out;
}

TEST(QuorumState, FormsWhenEveryLiveReplicaAsked) {
  QuorumState s;
  const Clock::time_point t0 = Clock::now();
  for (const char* id : {"a", "b", "c"}) s.heard(id, t0);
  s.request(req("b", 3), t0);
  s.request(req("a", 3), t0);
  EXPECT_FALSE(s.try_form(t0 + 10ms));  // c is live and has not asked
  s.request(req("c", 2), t0 + 20ms);
  std::optional<Quorum> q = s.try_form(t0 + 20ms);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->id, 1u);
  EXPECT_EQ(ids(*q), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(q->members[2].step, 2);
  EXPECT_FALSE(s.try_form(t0 + 30ms));  // the requests were answered
}

TEST(QuorumState, DropsALostReplicaAtOnceAndAStoppedOneByItsHeartbeat) {
  QuorumState s;
  const Clock::time_point t0 = Clock::now();
  for (const char* id : {"a", "b", "c"}) s.request(req(id, 1), t0);
  const uint64_t epoch = s.try_form(t0)->group_epoch;
  // c's connections close (SIGKILL): the quorum does not wait for it.
  s.request(req("a", 2), t0 + 1ms);
  s.request(req("b", 2), t0 + 1ms);
  s.lost("c");
  std::optional<Quorum> q = s.try_form(t0 + 2ms);
  ASSERT_TRUE(q);
  EXPECT_EQ(ids(*q), (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(q->group_epoch, epoch);  // new members, new group
  // b stops (SIGSTOP): still connected, no heartbeat; a waits until b's
  // heartbeat is older than the heartbeat timeout (here before the join timeout).
  s.heard("c", t0 + 2ms);  // c's replacement
  s.request(req("a", 3), t0 + 100ms);
  s.request(req("c", 0), t0 + 100ms);
  ASSERT_TRUE(s.next_deadline(t0 + 100ms));
  EXPECT_FALSE(s.try_form(t0 + 200ms));
  q = s.try_form(t0 + 1003ms);  // b last heard at 1 ms: gone after 1001 ms
  ASSERT_TRUE(q);
  EXPECT_EQ(ids(*q), (std::vector<std::string>{"a", "c"}));
}

TEST(QuorumState, JoinTimeoutFormsWithWhoeverAskedAndMinReplicasHoldsIt) {
  QuorumState s;
  const Clock::time_point t0 = Clock::now();
  QuorumRequest a = req("a", 5);
  a.min_replicas = 2;
  s.request(a, t0);
  EXPECT_FALSE(s.try_form(t0 + 600ms));  // one replica, two needed
  QuorumRequest b = req("b", 5);
  b.min_replicas = 2;
  s.heard("c", t0 + 600ms);  // live, never asks
  s.request(b, t0 + 600ms);
  EXPECT_FALSE(s.try_form(t0 + 400ms));
  std::optional<Quorum> q = s.try_form(t0 + 501ms);
  ASSERT_TRUE(q);
  EXPECT_EQ(ids(*q), (std::vector<std::string>{"a", "b"}));
}

TEST(QuorumState, AFailedStepChangesTheGroupEpochWithTheSameMembers) {
  QuorumState s;
  const Clock::time_point t0 = Clock::now();
  s.request(req("a", 1), t0);
  s.request(req("b", 1), t0);
  const uint64_t e1 = s.try_form(t0)->group_epoch;
  s.request(req("a", 2), t0);
  s.request(req("b", 2), t0);
  EXPECT_EQ(s.try_form(t0)->group_epoch, e1);  // same members, nothing failed: same group
  s.request(req("a", 2, /*failed=*/true), t0);
  s.request(req("b", 2), t0);
  EXPECT_NE(s.try_form(t0)->group_epoch, e1);
}

TcpStoreOptions client(uint16_t port) {
  TcpStoreOptions o;
  o.port = port;
  o.token = "q";
  o.timeout = 10s;
  return o;
}

TEST(QuorumService, TheStoreServerAnswersEveryReplicaWithTheSameQuorum) {
  TcpStoreServer server({.bind_host = "127.0.0.1", .token = "q"});
  std::vector<Quorum> got(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      TcpStore store(client(server.port()));
      // The replicas start at different times: the first quorum waits for all three.
      QuorumRequest q = req("r" + std::to_string(r), r);
      q.min_replicas = 3;
      got[static_cast<size_t>(r)] = store.quorum(q, 5s);
    });
  }
  for (auto& t : threads) t.join();
  for (const Quorum& q : got) {
    EXPECT_EQ(q.id, got[0].id);
    EXPECT_EQ(q.group_epoch, got[0].group_epoch);
    EXPECT_EQ(ids(q), (std::vector<std::string>{"r0", "r1", "r2"})) << q.members.size();
  }
}

TEST(QuorumService, AClosedConnectionDropsTheReplicaAndATimeoutNamesWhoItWaitedFor) {
  TcpStoreServer server({.bind_host = "127.0.0.1", .token = "q"});
  TcpStore a(client(server.port()));
  {
    TcpStore b(client(server.port()));
    b.heartbeat("b");
    a.heartbeat("a");
    // b is live and has not asked: a waits for it, then says so.
    QuorumRequest r = req("a", 1);
    r.join_timeout = 5s;
    try {
      a.quorum(r, 300ms);
      ADD_FAILURE() << "a quorum formed without b";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("live replica b"), std::string::npos) << e.what();
    }
  }  // b's connections close: it is gone
  QuorumRequest r = req("a", 1);
  r.join_timeout = 5s;
  const Quorum q = a.quorum(r, 3s);
  EXPECT_EQ(ids(q), (std::vector<std::string>{"a"}));
}

}  // namespace
}  // namespace cohort::rendezvous
