// `cohort train --trace`: a 2-rank DDP run under `cohort run` leaves one
// Chrome trace with both ranks' phases and every bucket's all_reduce;
// `cohort trace-stats` reads it back; a failed run leaves each rank's part.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/train/process_util.h"
#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

TEST(TrainTrace, DdpRunWritesOneTraceWithBothRanksAndEveryBucket) {
  const std::string dir = make_temp_dir("trace");
  const std::string path = dir + "/trace.json";
  // Small buckets: Net's gradients in several, so some start inside backward.
  Finished f = run_command(
      run_argv(2, {}, {"--max-steps", "3", "--bucket-cap-mb", "0.02", "--trace", path}));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  auto doc = nlohmann::json::parse(read_file(path));
  std::map<int, std::map<std::string, int>> count;  // pid -> span name -> count
  std::map<int, std::string> process_names;
  std::map<int, std::set<std::string>> buckets;
  for (const auto& e : doc.at("traceEvents")) {
    const int pid = e.at("pid");
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      process_names[pid] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    EXPECT_GE(e.at("dur").get<int64_t>(), 0);
    const std::string name = e.at("name");
    if (e.at("cat") == "comm" && name.rfind("all_reduce bucket", 0) == 0) {
      buckets[pid].insert(name);
      ++count[pid]["all_reduce"];
    } else {
      ++count[pid][name];
    }
  }
  ASSERT_EQ(process_names, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  for (int rank : {0, 1}) {
    for (const char* phase :
         {"data", "step", "forward", "backward", "optimizer", "wait for gradient reduction"}) {
      EXPECT_EQ(count[rank][phase], 3) << "rank " << rank << " " << phase;
    }
    EXPECT_EQ(count[rank]["evaluate"], 1) << "rank " << rank;
    EXPECT_GT(buckets[rank].size(), 1u) << "rank " << rank;
    EXPECT_EQ(count[rank]["all_reduce"], 3 * static_cast<int>(buckets[rank].size()));
  }

  Finished stats = run_command({kCohort, "trace-stats", path});
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  for (const char* want : {"rank 0: 3 steps", "rank 1: 3 steps", "rank 0: all_reduce",
                           "rank 1: all_reduce", "during backward's compute: overlap"}) {
    EXPECT_NE(stats.output.find(want), std::string::npos) << want << " in\n" << stats.output;
  }
}

TEST(TrainTrace, FailedRunLeavesItsRanksPart) {
  const std::string dir = make_temp_dir("tracefail");
  const std::string path = dir + "/trace.json";
  Finished f = run_command(
      train_argv({"--lr", "1e12", "--momentum", "0", "--max-steps", "50", "--trace", path}));
  ASSERT_NE(f.exit_code, 0) << f.output;
  auto doc = nlohmann::json::parse(read_file(path + ".rank0.json"));
  int steps = 0;
  for (const auto& e : doc.at("traceEvents")) steps += e.at("name") == "forward" ? 1 : 0;
  EXPECT_GT(steps, 0);
}

TEST(TrainTrace, StatsRejectsAFileThatIsNotATrace) {
  const std::string dir = make_temp_dir("tracebad");
  Finished f = run_command({kCohort, "trace-stats", dir + "/missing.json"});
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_NE(f.output.find("cannot read " + dir + "/missing.json"), std::string::npos) << f.output;
}

}  // namespace
}  // namespace cohort::test
