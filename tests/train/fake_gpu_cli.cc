// The cohort CLI with a fake GPU (cohort_fake_gpu, a test build): the fake
// CUDA device with cohort's CPU kernels behind its kernel tables
// (core/fake_device_kernels_testing.h) stands for cuda:0, so that the CLI's
// GPU paths -- workers placed on their device, --backend auto, DDP and ZeRO
// on device tensors, the data loader's device copies, evaluation and
// checkpoints from a device -- run end to end on a machine without a GPU.
// It checks that plumbing, not CUDA kernels; its models are those whose ops
// the fake kernels cover (mlp, toy).
#include <cstdio>
#include <cstdlib>

#include "cohort/core/fake_device_kernels_testing.h"

extern "C" void cohort_cli_before_main() {
  // Kept for the whole process: restoring the kernel tables at exit would
  // race the exit of the process's other threads.
  static auto* device = new cohort::testing::FakeCudaDevice(1);
  static auto* kernels = new cohort::testing::FakeDeviceKernels();
  (void)device;
  (void)kernels;
  // What ran on the "GPU", for the tests to see that the device path was taken.
  std::atexit([] {
    std::fprintf(stderr, "fake gpu: %llu kernel calls\n",
                 static_cast<unsigned long long>(cohort::testing::fake_kernels::calls.load()));
  });
}
