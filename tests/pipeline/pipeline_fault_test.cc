// A rank dying in the middle of a pipeline: the others must fail within
// seconds with an error that names the dead rank, long before the group's
// timeout (300 s, beyond the test's limit: only failure detection can end
// their waits). run_processes kills and reports any rank that hangs.
#include <gtest/gtest.h>
#include <unistd.h>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/parallel/pipeline/pipeline.h"
#include "tests/distributed/process_runner.h"

namespace cohort::parallel::pipeline {
namespace {

using namespace std::chrono_literals;

void dies_mid_pipeline(Schedule schedule) {
  std::string path = testing::temp_path("cohort-pipeline-crash");
  auto status = testing::run_processes(3, 45s, [&](int rank) {
    auto world = distributed::init_process_group("native", "file://" + path, 3, rank, 300s);
    Generator gen(1);
    auto model = nn::make_mlp(gen, {.width = 32, .hidden_layers = 2});
    Pipeline pipe(model, make_pipeline_grid(world, 3), {.schedule = schedule, .micro_batches = 3});
    Tensor x = rand({6, 1, 28, 28}, gen);
    Tensor y = randint(0, 10, {6}, gen);
    for (int step = 0; step < 10; ++step) {
      if (rank == 1 && step == 2) ::_exit(3);
      try {
        pipe.step(x, y, nll_loss_fn);
      } catch (const Error& e) {
        std::string m = e.what();
        // The cause (after "failed: ") must name the lost rank, not only the
        // action that talked to it.
        auto cause = m.find("failed: ");
        auto last = m.find("[last actions");
        if (step != 2 || cause == std::string::npos || last == std::string::npos ||
            m.substr(cause, last - cause).find("rank 1") == std::string::npos ||
            m.find(fmt::format("rank {} (stage {}", rank, rank)) == std::string::npos)
          throw Error("error does not name the step, this rank and the lost rank: " + m);
        std::fprintf(stderr, "rank %d failed as expected: %s\n", rank, m.c_str());
        return;
      }
    }
    throw Error("the pipeline ran on without rank 1");
  });
  ::unlink(path.c_str());
  for (int r : {0, 2}) EXPECT_TRUE(testing::exited_ok(status[r])) << "rank " << r;
  EXPECT_TRUE(WIFEXITED(status[1]) && WEXITSTATUS(status[1]) == 3);
}

TEST(PipelineFault, RankDyingMidPipelineFailsTheOthersFast1F1B) {
  dies_mid_pipeline(Schedule::k1F1B);
}

TEST(PipelineFault, RankDyingMidPipelineFailsTheOthersFastZBH1) {
  dies_mid_pipeline(Schedule::kZeroBubbleH1);
}

}  // namespace
}  // namespace cohort::parallel::pipeline
