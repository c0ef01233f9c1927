// `cohort train --device cuda` end to end without a GPU: the workers are
// cohort_fake_gpu (fake_gpu_cli.cc), the CLI whose cuda:0 is the fake device
// with cohort's CPU kernels behind it. Two workers share that one "GPU", so
// --backend auto picks native and says why; DDP and every ZeRO stage on the
// device write the checkpoint the same job writes on the CPU (to float32
// tolerance: the device path calls the unfused kernels), which also shows a
// checkpoint written from a GPU loads on the CPU. What this checks is the
// CLI's device plumbing (workers placed on their device, the model moved
// before it is wrapped, batches copied to it, evaluation and checkpoints
// from it), not CUDA kernels: scripts/gpu_check.sh runs the same jobs on a
// GPU.
#include <gtest/gtest.h>

#include "cohort/distributed/backend.h"
#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

const std::string kFakeGpu = COHORT_FAKE_GPU_BIN;

// `cohort run --nproc-per-node 2` of `worker train` on the small synthetic
// MLP job (the fake kernels cover its ops).
std::vector<std::string> job(const std::string& worker, std::vector<std::string> extra) {
  std::vector<std::string> argv = {kCohort, "run", "--nproc-per-node", "2"};
  extra.insert(extra.end(), {"--max-steps", "4"});
  auto t = train_argv_of(worker, "mlp", std::move(extra));
  argv.insert(argv.end(), t.begin(), t.end());
  return argv;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(TrainFakeGpu, DdpAndEveryZeroStageOnTheDeviceWriteTheCpuJobsCheckpoint) {
  const char* why = distributed::backend_available(distributed::BackendKind::kNccl)
                        ? "2 local ranks share 1 GPU"
                        : "this build has no NCCL";
  struct Case {
    std::string name;
    std::vector<std::string> args;
  };
  const std::vector<Case> cases = {
      {"ddp", {"--strategy", "ddp"}},
      {"zero1", {"--strategy", "zero", "--zero-stage", "1"}},
      {"zero2", {"--strategy", "zero", "--zero-stage", "2"}},
      {"zero3", {"--strategy", "zero", "--zero-stage", "3"}},
  };
  for (const Case& c : cases) {
    const std::string cpu = make_temp_dir("fake-gpu-cpu-" + c.name);
    const std::string gpu = make_temp_dir("fake-gpu-" + c.name);
    std::vector<std::string> on_cpu = c.args, on_gpu = c.args;
    on_cpu.insert(on_cpu.end(), {"--device", "cpu", "--checkpoint-dir", cpu});
    on_gpu.insert(on_gpu.end(), {"--device", "cuda", "--checkpoint-dir", gpu});
    Finished a = run_command(job(kCohort, on_cpu));
    ASSERT_EQ(a.exit_code, 0) << c.name << ": " << a.output;
    Finished b = run_command(job(kFakeGpu, on_gpu));
    ASSERT_EQ(b.exit_code, 0) << c.name << ": " << b.output;
    EXPECT_TRUE(has(b.output, "rank 0 on cuda:0")) << b.output;
    // Each worker trained through the device's kernels.
    EXPECT_TRUE(has(b.output, "fake gpu: ")) << b.output;
    EXPECT_FALSE(has(b.output, "fake gpu: 0 kernel calls")) << b.output;
    EXPECT_TRUE(has(b.output, std::string("backend native (") + why)) << b.output;
    expect_close_checkpoints(step_dir(cpu, 4), step_dir(gpu, 4));
  }
}

}  // namespace
}  // namespace cohort::test
