// DistributedDataParallel faults between real processes: ranks wrapping
// different models get an InvalidArgument on every rank naming the first
// difference and the ranks; a rank that dies during construction makes the
// others fail fast (the group's timeout is far beyond the test's limit, so
// only failure detection can end their wait); a parameter that gets no
// gradient without find_unused_parameters is named at the next forward.
// run_processes kills and reports any rank that hangs.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/nn.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "tests/distributed/process_runner.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::shared_ptr<distributed::ProcessGroup> join(const std::string& path, int rank, int n,
                                                distributed::Duration timeout) {
  return distributed::init_process_group("native", "file://" + path, n, rank, timeout);
}

// Linear(in, hidden) -> Linear(hidden, out), optionally with an extra head.
class Mlp : public nn::Cloneable<Mlp> {
 public:
  Mlp(int64_t hidden, bool extra, Generator& gen) : Cloneable("Mlp") {
    register_module("fc1", std::make_shared<nn::Linear>(4, hidden, gen));
    register_module("fc2", std::make_shared<nn::Linear>(hidden, 2, gen));
    if (extra) register_module("extra", std::make_shared<nn::Linear>(2, 2, gen));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = child<nn::Linear>(1).forward(relu(child<nn::Linear>(0).forward(x)));
    return skip_extra || num_children() < 3 ? h : child<nn::Linear>(2).forward(h);
  }
  bool skip_extra = false;
};

void expect_all_ok(const std::vector<int>& status) {
  for (size_t r = 0; r < status.size(); ++r)
    EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r << " status " << status[r];
}

TEST(DDPFault, DifferentShapesNameTheParameterAndRanks) {
  std::string path = testing::temp_path("cohort-ddp-shape");
  auto status = testing::run_processes(3, 60s, [&](int rank) {
    auto pg = join(path, rank, 3, 120s);
    Generator gen(1);
    auto model = std::make_shared<Mlp>(rank == 2 ? 9 : 8, false, gen);
    try {
      DistributedDataParallel ddp(model, pg);
    } catch (const InvalidArgument& e) {
      std::string m = e.what();
      if (!contains(m, "rank(s) 2") || !contains(m, "fc1.weight") || !contains(m, "[8, 4]") ||
          !contains(m, "[9, 4]"))
        throw Error("message does not name the difference: " + m);
      return;
    }
    throw Error("DDP accepted different models");
  });
  ::unlink(path.c_str());
  expect_all_ok(status);
}

TEST(DDPFault, DifferentParameterCountsAreReported) {
  std::string path = testing::temp_path("cohort-ddp-count");
  auto status = testing::run_processes(2, 60s, [&](int rank) {
    auto pg = join(path, rank, 2, 120s);
    Generator gen(1);
    auto model = std::make_shared<Mlp>(8, rank == 1, gen);
    try {
      DistributedDataParallel ddp(model, pg);
    } catch (const InvalidArgument& e) {
      std::string m = e.what();
      if (!contains(m, "rank 1 has 6") || !contains(m, "extra.weight"))
        throw Error("message does not name the difference: " + m);
      return;
    }
    throw Error("DDP accepted different models");
  });
  ::unlink(path.c_str());
  expect_all_ok(status);
}

TEST(DDPFault, RankDyingDuringConstructionFailsTheOthersFast) {
  std::string path = testing::temp_path("cohort-ddp-crash");
  auto status = testing::run_processes(3, 45s, [&](int rank) {
    // 300 s: far beyond the test's limit; only failure detection ends the waits.
    auto pg = join(path, rank, 3, 300s);
    if (rank == 1) ::raise(SIGKILL);
    Generator gen(1);
    try {
      DistributedDataParallel ddp(std::make_shared<Mlp>(8, false, gen), pg);
    } catch (const Error& e) {
      std::string m = e.what();
      if (!contains(m, "DistributedDataParallel") || !contains(m, "rank 1"))
        throw Error("error does not name DDP and the lost rank: " + m);
      return;
    }
    throw Error("DDP construction succeeded without rank 1");
  });
  ::unlink(path.c_str());
  for (int r : {0, 2}) EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r;
  EXPECT_TRUE(WIFSIGNALED(status[1]));
}

TEST(DDPFault, UnusedParameterWithoutFindUnusedIsNamed) {
  std::string path = testing::temp_path("cohort-ddp-unused");
  auto status = testing::run_processes(2, 60s, [&](int rank) {
    auto pg = join(path, rank, 2, 300s);
    Generator gen(1);
    auto model = std::make_shared<Mlp>(8, true, gen);
    DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 1e-4});
    Tensor x = randn({4, 4}, gen);
    if (rank == 1) {
      model->skip_extra = true;
      sum(ddp.forward(x)).backward();  // extra.* get no gradient: their bucket never launches
      try {
        ddp.forward(x);
      } catch (const InvalidArgument& e) {
        std::string m = e.what();
        if (!contains(m, "extra.weight") || !contains(m, "find_unused_parameters"))
          throw Error("message does not name the unused parameters: " + m);
        return;  // exiting closes the connections: rank 0 sees the loss
      }
      throw Error("second forward did not report the unfinished reduction");
    }
    try {
      sum(ddp.forward(x)).backward();
    } catch (const Error& e) {
      return;  // rank 1 left without reducing extra.*
    }
    throw Error("rank 0's backward finished although rank 1 never reduced extra.*");
  });
  ::unlink(path.c_str());
  expect_all_ok(status);
}

}  // namespace
}  // namespace cohort::parallel
