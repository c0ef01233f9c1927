// The flight recorder: a ring of the last collectives with their states, the
// comparison between ranks when an op times out, and the JSON dump.
#include "cohort/collectives/flight_recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/collectives/communicator.h"
#include "cohort/collectives/test_util.h"

namespace cohort::collectives {
namespace {

using namespace std::chrono_literals;

OpDesc op(OpKind kind, uint64_t seq, uint64_t count) {
  OpDesc d{kind};
  d.seq = seq;
  d.count = count;
  d.dtype = DataType::kFloat32;
  return d;
}

TEST(FlightRecorder, KeepsTheLastEntriesInOrderWithTheirStates) {
  FlightRecorder r(3);  // rounded up to 4
  EXPECT_EQ(r.capacity(), 4u);
  EXPECT_EQ(r.summary(), "no collective yet");
  for (uint64_t s = 0; s < 5; ++s)
    r.finish(r.start(op(OpKind::kAllReduce, s, 10)), OpState::kCompleted);
  const size_t last = r.start(op(OpKind::kBroadcast, 5, 7));
  std::vector<FlightEntry> e = r.snapshot();
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].desc.seq, 2u);
  EXPECT_EQ(e[1].desc.seq, 3u);
  EXPECT_EQ(e[2].desc.seq, 4u);
  EXPECT_EQ(e[3].desc.seq, 5u);
  EXPECT_EQ(e[2].state, OpState::kCompleted);
  EXPECT_EQ(e[3].state, OpState::kStarted);
  EXPECT_EQ(r.summary(), "is in broadcast #5 (7 float32)");
  r.waiting(last, std::chrono::steady_clock::now());
  EXPECT_EQ(r.summary().rfind("is in broadcast #5 (7 float32), waiting 0.", 0), 0u) << r.summary();
  r.finish(last, OpState::kFailed);
  EXPECT_EQ(r.summary(), "failed in broadcast #5 (7 float32)");
  auto doc = nlohmann::json::parse(r.to_json(2, "g"));
  EXPECT_EQ(doc.at("rank"), 2);
  ASSERT_EQ(doc.at("entries").size(), 4u);
  EXPECT_EQ(doc.at("entries")[3].at("op"), "broadcast");
  EXPECT_EQ(doc.at("entries")[3].at("state"), "failed");
  EXPECT_TRUE(doc.at("entries")[3].contains("waiting_since_unix_us"));
  EXPECT_FALSE(doc.at("entries")[2].contains("waiting_since_unix_us"));
  FlightRecorder off(0);
  off.finish(off.start(op(OpKind::kAllReduce, 0, 1)), OpState::kCompleted);
  EXPECT_TRUE(off.snapshot().empty());
}

// Ranks 0 and 1 wait in all_reduce #1 for rank 2, which is busy elsewhere:
// the time-out says where each rank is, and rank 0 dumps its record.
TEST(FlightRecorder, TimeoutNamesWhereEveryRankIs) {
  const std::string name = testing::unique_name("flight");
  const std::string dir = "/tmp/cohort-flight-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto status = testing::run_processes(3, 60s, [&](int rank, rendezvous::Store& store) {
    CommunicatorOptions o;
    o.name = name;
    o.timeout = 1s;
    o.flight_recorder_dir = dir;
    auto comm = Communicator::create(store, rank, 3, o);
    comm->set_diagnostic_store(std::shared_ptr<rendezvous::Store>(&store, [](auto*) {}));
    comm->barrier();  // #0
    float x = 1;
    if (rank == 2) {
      std::this_thread::sleep_for(4s);  // computing, not in a collective
      try {
        comm->all_reduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
      } catch (const Error&) {
      }
      return;
    }
    try {
      comm->all_reduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);  // #1
      throw Error("all_reduce without rank 2 did not fail");
    } catch (const TimeoutError& e) {
      if (rank != 0) return;
      const std::string m = e.what();
      for (const std::string& want :
           {std::string("[flight recorder: rank 0 (this one) is in all_reduce #1 (1 float32)"),
            std::string("rank 1 is in all_reduce #1 (1 float32), waiting"),
            std::string("rank 2 did not answer within 1000 ms")}) {
        if (m.find(want) == std::string::npos) throw Error("missing '" + want + "' in: " + m);
      }
    }
  });
  for (int s : status) EXPECT_TRUE(testing::exited_ok(s));
  std::ifstream in(dir + "/flight_recorder_rank0.json");
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = nlohmann::json::parse(ss.str());
  ASSERT_EQ(doc.at("entries").size(), 2u) << ss.str();
  EXPECT_EQ(doc.at("entries")[0].at("op"), "barrier");
  EXPECT_EQ(doc.at("entries")[0].at("state"), "completed");
  EXPECT_EQ(doc.at("entries")[1].at("op"), "all_reduce");
  EXPECT_EQ(doc.at("entries")[1].at("state"), "failed");
  EXPECT_TRUE(doc.at("entries")[1].contains("waiting_since_unix_us"));
  std::filesystem::remove_all(dir);
}

// A rank that died is named as gone at once: no waiting for its answer.
TEST(FlightRecorder, LostPeerIsNamedGone) {
  const std::string name = testing::unique_name("flightgone");
  auto status = testing::run_processes(2, 60s, [&](int rank, rendezvous::Store& store) {
    CommunicatorOptions o;
    o.name = name;
    o.timeout = 30s;
    auto comm = Communicator::create(store, rank, 2, o);
    comm->set_diagnostic_store(std::shared_ptr<rendezvous::Store>(&store, [](auto*) {}));
    comm->barrier();
    if (rank == 1) std::_Exit(0);  // dies without a goodbye
    float x = 1;
    try {
      comm->all_reduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
      throw Error("all_reduce with a dead peer did not fail");
    } catch (const PeerLost& e) {
      const std::string m = e.what();
      if (m.find("rank 1 is gone (its connection closed") == std::string::npos ||
          m.find("rank 0 (this one) is in all_reduce #1") == std::string::npos)
        throw Error("flight recorder comparison missing in: " + m);
    }
  });
  for (int s : status) EXPECT_TRUE(testing::exited_ok(s));
}

}  // namespace
}  // namespace cohort::collectives
