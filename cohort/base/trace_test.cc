#include "cohort/base/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cohort/base/error.h"

namespace cohort {
namespace {

TEST(Tracer, SpansBecomeChromeTraceEventsWithNamedTracks) {
  Tracer t(3, "rank 3");
  const auto t0 = Tracer::Clock::now();
  t.span("main", "forward", "compute", t0, t0 + std::chrono::microseconds(1500));
  t.span("comm", "all_reduce \"bucket\" 0", "comm", t0 + std::chrono::microseconds(200),
         t0 + std::chrono::microseconds(900), "\"bytes\":4096");
  { TraceSpan s(&t, "main", "backward", "compute"); }
  { TraceSpan none(nullptr, "main", "ignored", "compute"); }
  EXPECT_EQ(t.spans(), 3u);

  auto doc = nlohmann::json::parse(Tracer::document({t.events_json()}));
  std::map<std::string, nlohmann::json> spans;
  std::map<int, std::string> track_names;
  for (const auto& e : doc.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), 3);
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      track_names[e.at("tid").get<int>()] = e.at("args").at("name");
    if (e.at("ph") == "X") spans[e.at("name")] = e;
  }
  ASSERT_EQ(spans.size(), 3u);
  const auto& fwd = spans.at("forward");
  const auto& ar = spans.at("all_reduce \"bucket\" 0");
  EXPECT_EQ(fwd.at("dur").get<int64_t>(), 1500);
  EXPECT_EQ(ar.at("ts").get<int64_t>() - fwd.at("ts").get<int64_t>(), 200);
  EXPECT_EQ(ar.at("args").at("bytes"), 4096);
  EXPECT_EQ(track_names.at(fwd.at("tid").get<int>()), "main");
  EXPECT_EQ(track_names.at(ar.at("tid").get<int>()), "comm");
  EXPECT_EQ(spans.at("backward").at("tid"), fwd.at("tid"));
}

TEST(Tracer, DocumentMergesProcessesAndConcurrentSpansAllArrive) {
  Tracer a(0, "rank 0"), b(1, "rank 1");
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&a] {
      for (int k = 0; k < 100; ++k) TraceSpan s(&a, "main", "step", "compute");
    });
  }
  for (auto& th : threads) th.join();
  b.span("main", "step", "compute", Tracer::Clock::now(), Tracer::Clock::now());
  auto doc = nlohmann::json::parse(Tracer::document({a.events_json(), "", b.events_json()}));
  std::map<int, int> per_pid;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "X") ++per_pid[e.at("pid").get<int>()];
  EXPECT_EQ(per_pid[0], 400);
  EXPECT_EQ(per_pid[1], 1);
}

TEST(Tracer, WriteIsAtomicAndNamesAnUnwritablePath) {
  Tracer t(0, "rank 0");
  t.span("main", "x", "compute", Tracer::Clock::now(), Tracer::Clock::now());
  const std::string path = "/tmp/cohort-trace-test-" + std::to_string(::getpid()) + ".json";
  t.write(path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NO_THROW((void)nlohmann::json::parse(ss.str()));
  std::remove(path.c_str());
  try {
    t.write("/nonexistent-dir/t.json");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/t.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace cohort
