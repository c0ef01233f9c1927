#include "cohort/base/cpu.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>

#include "cohort/base/error.h"

namespace cohort {
namespace {

TEST(UsableCpus, FollowsTheAffinityMask) {
  const int all = usable_cpus();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // pinned to the first CPU of the mask, as `cohort run` pins a rank
    cpu_set_t set, one;
    CPU_ZERO(&set);
    CPU_ZERO(&one);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) _exit(2);
    int first = 0;
    while (!CPU_ISSET(first, &set)) ++first;
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) _exit(3);
    _exit(usable_cpus() == 1 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(KernelPath, NamesRoundTrip) {
  for (KernelPath p : {KernelPath::kBaseline, KernelPath::kAvx2, KernelPath::kAvx512})
    EXPECT_EQ(parse_kernel_path(kernel_path_name(p)), p);
}

TEST(KernelPath, UnknownNameListsTheChoices) {
  try {
    parse_kernel_path("sse9");
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'sse9'"), std::string::npos) << what;
    EXPECT_NE(what.find("baseline, avx2, avx512"), std::string::npos) << what;
  }
}

TEST(KernelPath, BaselineIsAlwaysSupportedAndBestIsSupported) {
  EXPECT_TRUE(kernel_path_supported(KernelPath::kBaseline));
  const auto paths = supported_kernel_paths();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.front(), KernelPath::kBaseline);
  EXPECT_EQ(paths.back(), best_kernel_path());
  EXPECT_TRUE(kernel_path_supported(best_kernel_path()));
}

TEST(KernelPath, SupportFollowsTheCpuFeatures) {
  const CpuFeatures& f = cpu_features();
#if defined(__x86_64__)
  EXPECT_EQ(kernel_path_supported(KernelPath::kAvx2), f.avx2 && f.fma && f.f16c);
  EXPECT_EQ(kernel_path_supported(KernelPath::kAvx512),
            f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl);
  EXPECT_TRUE(f.sse42) << "the baseline build needs x86-64-v2";
#else
  EXPECT_FALSE(kernel_path_supported(KernelPath::kAvx2));
  EXPECT_FALSE(kernel_path_supported(KernelPath::kAvx512));
#endif
  EXPECT_FALSE(f.arch.empty());
  EXPECT_FALSE(f.model.empty());
}

TEST(KernelPath, ForcingAnUnsupportedPathThrowsAndChangesNothing) {
  const KernelPath before = kernel_path();
  for (KernelPath p : {KernelPath::kAvx2, KernelPath::kAvx512}) {
    if (kernel_path_supported(p)) continue;
    try {
      set_kernel_path(p);
      FAIL() << "no throw for " << kernel_path_name(p);
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(kernel_path_name(p)), std::string::npos) << what;
      EXPECT_NE(what.find("this CPU can run: baseline"), std::string::npos) << what;
    }
    EXPECT_EQ(kernel_path(), before);
  }
}

TEST(KernelPath, GuardForcesAndRestores) {
  const KernelPath before = kernel_path();
  for (KernelPath p : supported_kernel_paths()) {
    {
      KernelPathGuard guard(p);
      EXPECT_EQ(kernel_path(), p);
    }
    EXPECT_EQ(kernel_path(), before);
  }
}

TEST(KernelPath, SettingAppliesNamesAndAutoAndNamesItsOriginWhenBad) {
  KernelPathGuard restore(kernel_path());
  apply_kernel_path_setting("baseline", "TEST_SETTING");
  EXPECT_EQ(kernel_path(), KernelPath::kBaseline);
  apply_kernel_path_setting("auto", "TEST_SETTING");
  EXPECT_EQ(kernel_path(), best_kernel_path());
  try {
    apply_kernel_path_setting("sse9", "TEST_SETTING");
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("TEST_SETTING=sse9: ", 0), 0u) << what;
    EXPECT_NE(what.find("baseline, avx2, avx512"), std::string::npos) << what;
  }
  EXPECT_EQ(kernel_path(), best_kernel_path());
}

}  // namespace
}  // namespace cohort
