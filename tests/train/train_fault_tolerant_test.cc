// `cohort train --fault-tolerant` under `cohort run --fault-tolerant` (a
// worker killed and restarted in place; --nnodes 1:2, a node joining and
// leaving the running job) and with `cohort lighthouse` (the quorum
// service in a process of its own) and three replicas started as a
// scheduler would: one is SIGKILLed mid-run, the other two go on without
// restarting, a replacement (COHORT_FT_REPLACEMENT=1) takes the state from a
// live one and trains on, and all finish every epoch; the lost replica and
// the state transfer are logged. What the loop does not do is refused, named.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/train/process_util.h"
#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

using namespace std::chrono_literals;

// Waits until `b`'s output matches `pattern`; returns the first group, or "".
std::string wait_for(const Background& b, const std::string& pattern,
                     std::chrono::seconds limit = 60s) {
  const std::regex re(pattern);
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    std::smatch m;
    const std::string out = b.output();
    if (std::regex_search(out, m, re)) return m.size() > 1 ? m[1].str() : m[0].str();
    std::this_thread::sleep_for(10ms);
  }
  return "";
}

std::vector<std::string> replica_env(int rank, const std::string& port, bool replacement) {
  std::vector<std::string> env = {"RANK=" + std::to_string(rank), "WORLD_SIZE=3",
                                  "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
                                  "COHORT_TOKEN=ft-e2e"};
  if (replacement) env.push_back("COHORT_FT_REPLACEMENT=1");
  return env;
}

TEST(TrainFaultTolerant, SurvivorsGoOnAndAReplacementRejoinsUnderALighthouse) {
  Background lighthouse({kCohort, "lighthouse", "--bind", "127.0.0.1", "--port", "0"},
                        {"COHORT_TOKEN=ft-e2e"});
  const std::string port = wait_for(lighthouse, "on 127\\.0\\.0\\.1:([0-9]+)");
  ASSERT_FALSE(port.empty()) << lighthouse.output();
  const std::vector<std::string> argv = train_argv(
      {"--fault-tolerant", "--synthetic-train-size", "6000", "--epochs", "3", "--log-every", "1"});
  std::vector<std::unique_ptr<Background>> r;
  for (int rank = 0; rank < 3; ++rank)
    r.push_back(std::make_unique<Background>(argv, replica_env(rank, port, false)));
  ASSERT_FALSE(wait_for(*r[0], "epoch 1/3 step 5/").empty()) << r[0]->output();
  ::kill(r[2]->pid(), SIGKILL);
  EXPECT_EQ(r[2]->wait(10s), 128 + SIGKILL);
  Background replacement(argv, replica_env(2, port, true));
  EXPECT_EQ(r[0]->wait(120s), 0) << r[0]->output();
  EXPECT_EQ(r[1]->wait(120s), 0) << r[1]->output();
  EXPECT_EQ(replacement.wait(120s), 0) << replacement.output();
  const std::string out = r[0]->output();
  EXPECT_NE(out.find("lost [rank2]"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 3: train loss"), std::string::npos) << out;
  EXPECT_NE(out.find("fault-tolerant"), std::string::npos) << out;
  EXPECT_NE(replacement.output().find("received the state of step"), std::string::npos)
      << replacement.output();
}

TEST(TrainFaultTolerant, CohortRunRestartsADeadWorkerIntoTheRunningJob) {
  std::vector<std::string> argv = {kCohort, "run", "--nproc-per-node", "3", "--fault-tolerant"};
  for (const std::string& a : train_argv({"--fault-tolerant", "--synthetic-train-size", "6000",
                                          "--epochs", "3", "--log-every", "1"}))
    argv.push_back(a);
  Background job(argv);
  ASSERT_FALSE(wait_for(job, "epoch 1/3 step 5/").empty()) << job.output();
  const pid_t worker = find_worker(job.pid(), 2);
  ASSERT_GT(worker, 0) << job.output();
  ::kill(worker, SIGKILL);
  EXPECT_EQ(job.wait(120s), 0) << job.output();
  const std::string out = job.output();
  EXPECT_NE(out.find("restarting it into the running job"), std::string::npos) << out;
  EXPECT_NE(out.find("lost [rank2]"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 2] "), std::string::npos) << out;
  EXPECT_NE(out.find("received the state of step"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 3: train loss"), std::string::npos) << out;
}

// Replicas of two workers with ZeRO-3 inside each: a worker killed, its
// partner stopped with it, both restarted together; they take the state from
// the live replica's two (process g from process g) and all finish.
TEST(TrainFaultTolerant, CohortRunRestartsAZeroReplicaOfTwoWorkersAsOne) {
  const std::string ckpt = make_temp_dir("ft_zero");
  std::vector<std::string> argv = {
      kCohort, "run", "--nproc-per-node", "4", "--fault-tolerant", "--replica-size", "2"};
  for (const std::string& a : train_argv({"--fault-tolerant", "--strategy", "zero", "--zero-stage",
                                          "3", "--synthetic-train-size", "12000", "--epochs", "3",
                                          "--log-every", "1", "--checkpoint-dir", ckpt}))
    argv.push_back(a);
  Background job(argv);
  ASSERT_FALSE(wait_for(job, "epoch 1/3 step 5/").empty()) << job.output();
  const pid_t worker = find_worker(job.pid(), 3);
  ASSERT_GT(worker, 0) << job.output();
  ::kill(worker, SIGKILL);
  EXPECT_EQ(job.wait(120s), 0) << job.output();
  const std::string out = job.output();
  EXPECT_NE(out.find("ZeRO stage 3"), std::string::npos) << out;
  EXPECT_NE(out.find("its replica (local ranks 2-3) fails as one"), std::string::npos) << out;
  EXPECT_NE(out.find("restarting the replica of local ranks 2-3 into the running job"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("lost [replica1]"), std::string::npos) << out;
  for (const char* rank : {"[rank 2] ", "[rank 3] "}) {
    const std::regex received(std::string("\\") + rank +
                              ".*received the state of step [0-9]+ from replica replica0");
    EXPECT_TRUE(std::regex_search(out, received)) << rank << out;
  }
  EXPECT_NE(out.find("epoch 3: train loss"), std::string::npos) << out;
  // The checkpoints of replica 0 (sharded, written by both of its workers).
  int checkpoints = 0;
  for (const auto& e : std::filesystem::directory_iterator(ckpt))
    checkpoints += e.path().filename().string().rfind("step-", 0) == 0 ? 1 : 0;
  EXPECT_EQ(checkpoints, 3) << out;
}

// A port that was free a moment ago (the launcher's store binds it next).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// One node of a fault-tolerant Net job: `cohort run --nnodes <nnodes>
// --node-rank <rank> --nproc-per-node 2 --master-port <port> <extra>
// --fault-tolerant`, three epochs, its output kept.
std::unique_ptr<Background> ft_node(const std::string& nnodes, int rank, const std::string& port,
                                    const std::string& token, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {kCohort,
                                   "run",
                                   "--nnodes",
                                   nnodes,
                                   "--node-rank",
                                   std::to_string(rank),
                                   "--nproc-per-node",
                                   "2",
                                   "--master-port",
                                   port};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--fault-tolerant");
  for (const std::string& a : train_argv({"--fault-tolerant", "--synthetic-train-size", "12000",
                                          "--epochs", "3", "--log-every", "1"}))
    argv.push_back(a);
  return std::make_unique<Background>(argv, std::vector<std::string>{"COHORT_TOKEN=" + token});
}

TEST(TrainFaultTolerant, NnodesMinMaxTakesInANodeAndLetsOneLeave) {
  // Node 0 starts alone (--nnodes 1:2); node 1 joins the running job, its
  // two workers take the state from node 0's, and later leaves (SIGTERM to
  // its launcher): its workers leave at a step boundary, node 0 finishes.
  const std::string port = std::to_string(free_port());
  auto node = [&](int rank) { return ft_node("1:2", rank, port, "elastic"); };
  auto n0 = node(0);
  ASSERT_FALSE(wait_for(*n0, "epoch 1/3 step 3/").empty()) << n0->output();
  auto n1 = node(1);
  ASSERT_FALSE(wait_for(*n1, "received the state of step").empty()) << n1->output();
  ASSERT_FALSE(wait_for(*n0, "quorum [0-9]+ of 4 replica").empty()) << n0->output();
  ::kill(n1->pid(), SIGTERM);
  EXPECT_EQ(n1->wait(60s), 128 + SIGTERM) << n1->output();
  EXPECT_EQ(n0->wait(120s), 0) << n0->output();
  const std::string out0 = n0->output(), out1 = n1->output();
  EXPECT_NE(out0.find("lost [rank2, rank3]"), std::string::npos) << out0;
  EXPECT_NE(out1.find("leaving at step"), std::string::npos) << out1;
  EXPECT_NE(out0.find("epoch 3: train loss"), std::string::npos) << out0;
  // Leaving at a step boundary fails no step of the others.
  EXPECT_EQ(out0.find("the last step failed here"), std::string::npos) << out0;
}

TEST(TrainFaultTolerant, ALostNodeOfAFixedSizeJobIsDroppedAndItsRestartRejoins) {
  // --nnodes 2 --fault-tolerant: the launchers are not linked, so node 1's
  // launcher SIGKILLed (its workers die with it) leaves node 0 training;
  // node 1 started again joins the running job and takes the state.
  const std::string port = std::to_string(free_port());
  auto node = [&](int rank) { return ft_node("2", rank, port, "fixed"); };
  auto n0 = node(0);
  auto n1 = node(1);
  ASSERT_FALSE(wait_for(*n0, "epoch 1/3 step 3/").empty()) << n0->output() << n1->output();
  ::kill(n1->pid(), SIGKILL);
  EXPECT_EQ(n1->wait(30s), 128 + SIGKILL);
  ASSERT_FALSE(wait_for(*n0, "lost \\[rank2, rank3\\]").empty()) << n0->output();
  auto again = node(1);
  EXPECT_EQ(n0->wait(120s), 0) << n0->output();
  EXPECT_EQ(again->wait(120s), 0) << again->output();
  const std::string out0 = n0->output(), out1 = again->output();
  // Its workers join when each is ready (in one quorum or two).
  for (const char* id : {"rank2", "rank3"})
    EXPECT_TRUE(std::regex_search(out0, std::regex(std::string("joined \\[[^\\]]*") + id)))
        << id << out0;
  EXPECT_NE(out1.find("received the state of step"), std::string::npos) << out1;
  EXPECT_NE(out0.find("epoch 3: train loss"), std::string::npos) << out0;
}

// With the quorum service in a `cohort lighthouse` and the launchers not
// hosting the store, node 0 is a node like the others: its launcher
// SIGKILLed, node 1's replicas go on, the lowest of them taking rank 0's duties.
TEST(TrainFaultTolerant, UnderALighthouseNodeZeroMayBeLostToo) {
  Background lighthouse({kCohort, "lighthouse", "--bind", "127.0.0.1", "--port", "0"},
                        {"COHORT_TOKEN=ft-lh"});
  const std::string port = wait_for(lighthouse, "on 127\\.0\\.0\\.1:([0-9]+)");
  ASSERT_FALSE(port.empty()) << lighthouse.output();
  auto node = [&](int rank) { return ft_node("2", rank, port, "ft-lh", {"--no-host-store"}); };
  auto n0 = node(0);
  auto n1 = node(1);
  ASSERT_FALSE(wait_for(*n0, "epoch 1/3 step 5/").empty()) << n0->output() << n1->output();
  ::kill(n0->pid(), SIGKILL);
  EXPECT_EQ(n0->wait(30s), 128 + SIGKILL);
  EXPECT_EQ(n1->wait(120s), 0) << n1->output();
  const std::string out = n1->output();
  EXPECT_NE(out.find("lost [rank0, rank1]"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 2] epoch 3: train loss"), std::string::npos) << out;
}

// A language model: each step's random windows are drawn for the ranks
// taking part (WindowSampler's draw), so without a fault the run equals DDP's
// to the printed digits, and through a kill it goes on and finishes.
TEST(TrainFaultTolerant, ALanguageModelEqualsDdpAndGoesOnThroughAKill) {
  const std::string dir = make_temp_dir("ft_lm");
  const std::string corpus = dir + "/corpus.txt";
  {
    std::ofstream text(corpus);
    uint32_t x = 12345;
    for (size_t n = 0; n < 40000;) {
      x = x * 1664525u + 1013904223u;
      const std::string word = std::string("abcdefgh").substr((x >> 24) % 8, 1 + (x >> 8) % 3);
      text << word << ' ';
      n += word.size() + 1;
    }
  }
  auto job = [&](std::vector<std::string> launcher, std::vector<std::string> train) {
    std::vector<std::string> argv = {kCohort, "run", "--nproc-per-node", "3"};
    argv.insert(argv.end(), launcher.begin(), launcher.end());
    for (const std::string& a : std::vector<std::string>{
             kCohort,        "train", "--model",     "gpt",  "--n-layer",      "2",
             "--n-head",     "2",     "--n-embd",    "32",   "--block-size",   "16",
             "--dataset",    "text",  "--data-file", corpus, "--threads",      "1",
             "--seed",       "3",     "--lr",        "3e-3", "--eval-batches", "4",
             "--batch-size", "8",     "--log-every", "10"})
      argv.push_back(a);
    argv.insert(argv.end(), train.begin(), train.end());
    return argv;
  };
  auto matches = [](const std::string& out, const std::string& pattern) {
    std::vector<std::string> v;
    const std::regex re(pattern);
    for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
      v.push_back((*it)[1].str());
    return v;
  };
  auto val_losses = [&](const std::string& out) {
    return matches(out, "epoch [0-9]+: train loss [0-9.]+, val loss ([0-9.]+)");
  };
  Finished ddp = run_command(job({}, {"--strategy", "ddp", "--epochs", "1", "--log-every", "1"}));
  Finished ft = run_command(
      job({"--fault-tolerant"}, {"--fault-tolerant", "--epochs", "1", "--log-every", "1"}));
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  ASSERT_EQ(ft.exit_code, 0) << ft.output;
  // The same windows and the same average: the losses agree to the printed
  // digits until the two reductions' rounding drifts apart (after ~80 steps).
  std::vector<std::string> a = matches(ft.output, "(step [0-9]+/[0-9]+ loss [0-9.]+)");
  std::vector<std::string> b = matches(ddp.output, "(step [0-9]+/[0-9]+ loss [0-9.]+)");
  ASSERT_GE(a.size(), 40u) << ft.output;
  ASSERT_GE(b.size(), 40u) << ddp.output;
  a.resize(40);
  b.resize(40);
  EXPECT_EQ(a, b) << ft.output << ddp.output;
  ASSERT_EQ(val_losses(ft.output).size(), 1u) << ft.output;
  ASSERT_EQ(val_losses(ddp.output).size(), 1u) << ddp.output;
  EXPECT_NEAR(std::stod(val_losses(ft.output)[0]), std::stod(val_losses(ddp.output)[0]), 1e-2);
  EXPECT_NE(ft.output.find("tokens/s"), std::string::npos) << ft.output;

  Background killed(
      job({"--fault-tolerant"}, {"--fault-tolerant", "--epochs", "8", "--log-every", "10"}));
  ASSERT_FALSE(wait_for(killed, "epoch 1/8 step 30/").empty()) << killed.output();
  const pid_t worker = find_worker(killed.pid(), 2);
  ASSERT_GT(worker, 0) << killed.output();
  ::kill(worker, SIGKILL);
  EXPECT_EQ(killed.wait(120s), 0) << killed.output();
  const std::string out = killed.output();
  // Its replacement may be back by the next quorum (no "lost" then), behind.
  EXPECT_NE(out.find("restarting it into the running job"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 2] cohort warning: ReplicaManager (replica rank2): received the "
                     "state of step"),
            std::string::npos)
      << out;
  EXPECT_EQ(val_losses(out).size(), 8u) << out;
}

TEST(TrainFaultTolerant, WhatTheLoopDoesNotDoIsRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--fault-tolerant", "--strategy", "pipeline"}, "--fault-tolerant is data parallel"},
      {{"--fault-tolerant", "--strategy", "zero"}, "--fault-tolerant --replica-size N"},
      {{"--fault-tolerant", "--resume", "auto", "--checkpoint-dir", "/tmp"},
       "a replacement takes the state from a live replica"},
      {{"--fault-tolerant"}, "run it under `cohort run --fault-tolerant`"},
      {{"--fault-tolerant", "--metrics", "/tmp/m.jsonl"}, "--metrics, --trace, --precision bf16"},
  };
  for (const auto& [extra, message] : cases) {
    // Whatever the caller's environment holds, no job here.
    Finished f = run_command(train_argv(extra), {"RANK=", "MASTER_PORT="});
    EXPECT_NE(f.exit_code, 0) << extra[1] << ": " << f.output;
    EXPECT_NE(f.output.find(message), std::string::npos) << extra[1] << ": " << f.output;
  }
}

}  // namespace
}  // namespace cohort::test
