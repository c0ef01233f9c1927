#include "cohort/parallel/reduction_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::parallel {
namespace {

using distributed::Work;

// A scheduler over fake launches: every launch returns an already completed
// Work (failed for the groups in `failing`) and logs what happens, so the
// tests see the order of launches and finishes without a process group.
struct Fake {
  std::vector<std::string> log;
  std::vector<size_t> failing;
  size_t in_flight = 0, most_in_flight = 0;

  ReductionCallbacks callbacks() {
    return ReductionCallbacks{
        .launch =
            [this](size_t g) {
              log.push_back(fmt::format("launch {}", g));
              most_in_flight = std::max(most_in_flight, ++in_flight);
              std::exception_ptr error;
              if (std::find(failing.begin(), failing.end(), g) != failing.end())
                error = std::make_exception_ptr(PeerLost("rank 1 is gone"));
              return BucketReduction{Work::completed("all_reduce", error),
                                     [this, g] {
                                       --in_flight;
                                       log.push_back(fmt::format("finish {}", g));
                                     },
                                     10};
            },
        .describe =
            [](size_t g, int stage) {
              return fmt::format("Test: reduction of group {} stage {}", g, stage);
            }};
  }
};

ReductionSchedulerOptions options(size_t max_in_flight = 0) {
  return ReductionSchedulerOptions{.what = "Test",
                                   .rank = 3,
                                   .max_in_flight = max_in_flight,
                                   .twice_hint = "a hint",
                                   .unfinished_advice = "Some advice"};
}

std::vector<std::string> names(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(fmt::format("p{}", i));
  return out;
}

TEST(ReductionScheduler, LaunchesGroupsInOrderWhateverOrderKeysArrive) {
  Fake fake;
  ReductionScheduler s(names(4), {{3, 2}, {1}, {0}}, options(), fake.callbacks());
  s.arm();
  // Group 2 and 1 complete first: nothing may start before group 0.
  EXPECT_FALSE(s.mark_ready(0));
  EXPECT_FALSE(s.mark_ready(1));
  EXPECT_TRUE(fake.log.empty());
  EXPECT_FALSE(s.mark_ready(3));
  EXPECT_TRUE(fake.log.empty());
  EXPECT_FALSE(s.work(0).defined());
  EXPECT_TRUE(s.mark_ready(2));  // group 0 complete: 0, 1, 2 go, in order
  EXPECT_EQ(fake.log, (std::vector<std::string>{"launch 0", "launch 1", "launch 2"}));
  EXPECT_TRUE(s.work(1).defined());
  s.wait_all();
  EXPECT_EQ(fake.log, (std::vector<std::string>{"launch 0", "launch 1", "launch 2", "finish 0",
                                                "finish 1", "finish 2"}));
  EXPECT_EQ(s.num_completed(), 1);
  EXPECT_EQ(s.launched_bytes(), 30u);
  EXPECT_FALSE(s.armed());
  EXPECT_FALSE(s.unfinished());
}

TEST(ReductionScheduler, CapsWhatIsInFlightFinishingTheOldestFirst) {
  Fake fake;
  ReductionScheduler s(names(5), {{0}, {1}, {2}, {3}, {4}}, options(2), fake.callbacks());
  s.arm();
  EXPECT_TRUE(s.mark_all_ready());
  EXPECT_EQ(fake.most_in_flight, 2u);
  EXPECT_EQ(fake.log, (std::vector<std::string>{"launch 0", "launch 1", "finish 0", "launch 2",
                                                "finish 1", "launch 3", "finish 2", "launch 4"}));
  s.wait_all();
  EXPECT_EQ(fake.in_flight, 0u);
  EXPECT_EQ(fake.log.back(), "finish 4");
}

TEST(ReductionScheduler, FailureKeepsTheTypeNamesTheGroupAndResets) {
  Fake fake;
  fake.failing = {1};
  ReductionScheduler s(names(3), {{2}, {1}, {0}}, options(), fake.callbacks());
  s.arm();
  s.mark_ready(2);
  s.mark_ready(1);
  EXPECT_TRUE(s.mark_ready(0));
  try {
    s.wait_all();
    FAIL() << "wait_all did not throw";
  } catch (const PeerLost& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Test: reduction of group 1 stage 0"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 is gone"), std::string::npos) << m;
  }
  // Group 1's finish never ran; the iteration is gone.
  EXPECT_EQ(fake.log, (std::vector<std::string>{"launch 0", "launch 1", "launch 2", "finish 0"}));
  EXPECT_FALSE(s.armed());
  EXPECT_FALSE(s.unfinished());
  EXPECT_EQ(s.num_completed(), 0);
  EXPECT_FALSE(s.work(0).defined());
}

TEST(ReductionScheduler, FailureUnderTheCapSurfacesWhileLaunching) {
  Fake fake;
  fake.failing = {0};
  ReductionScheduler s(names(3), {{0}, {1}, {2}}, options(1), fake.callbacks());
  s.arm();
  EXPECT_FALSE(s.mark_ready(0));
  try {
    s.mark_ready(1);  // launching group 1 first finishes group 0
    FAIL() << "mark_ready did not throw";
  } catch (const PeerLost& e) {
    EXPECT_NE(std::string(e.what()).find("group 0 stage 0"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(s.armed());
}

TEST(ReductionScheduler, MissingGradientsAreNamedAtTheNextIteration) {
  Fake fake;
  ReductionScheduler s(names(12), {{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, {0}}, options(),
                       fake.callbacks());
  // Key 0 trains nothing... and keys in no group are never waited for.
  s.arm();
  s.mark_ready(11);
  EXPECT_TRUE(s.unfinished());
  EXPECT_EQ(s.describe_unready(),
            "11 parameter(s) received no gradient: 'p0', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', "
            "'p7' and 3 more");
  try {
    s.throw_if_unfinished();
    FAIL() << "throw_if_unfinished did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "Test (rank 3): the previous iteration's gradient reduction did not finish: 11 "
              "parameter(s) received no gradient: 'p0', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', "
              "'p7' and 3 more. Some advice");
  }
  EXPECT_FALSE(s.unfinished());
  s.throw_if_unfinished();  // once reported, the next iteration starts clean

  ReductionScheduler frozen(names(3), {{2}, {0}}, options(), fake.callbacks());
  frozen.arm();
  frozen.mark_ready(2);
  EXPECT_EQ(frozen.describe_unready(), "1 parameter(s) received no gradient: 'p0'");
}

TEST(ReductionScheduler, AKeyMarkedTwiceIsNamed) {
  Fake fake;
  ReductionScheduler s(names(2), {{1}, {0}}, options(), fake.callbacks());
  s.arm();
  s.mark_ready(1);
  try {
    s.mark_ready(1);
    FAIL() << "mark_ready did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "Test (rank 3): parameter 'p1' got its gradient twice in one iteration (a hint)");
  }
  EXPECT_FALSE(s.armed());
}

TEST(ReductionScheduler, UnusedKeysAreMarkedAtTheFirstHookNotAtArm) {
  Fake fake;
  std::vector<size_t> seen;
  ReductionCallbacks cb = fake.callbacks();
  cb.on_ready = [&](size_t k) { seen.push_back(k); };
  ReductionScheduler s(names(3), {{2, 1}, {0}}, options(), cb);
  s.arm({1, 0});
  EXPECT_TRUE(seen.empty());  // a forward without a backward launches nothing
  EXPECT_TRUE(s.mark_ready(2));
  EXPECT_EQ(seen, (std::vector<size_t>{1, 0, 2}));
  s.wait_all();
  EXPECT_EQ(s.num_completed(), 1);
}

TEST(ReductionScheduler, DisarmedHooksDoNothingAndNoLaunchOnlyAccumulates) {
  Fake fake;
  std::vector<size_t> accumulated;
  ReductionCallbacks cb = fake.callbacks();
  cb.on_accumulated = [&](size_t g) { accumulated.push_back(g); };
  ReductionScheduler s(names(3), {{2}, {1, 0}}, options(), cb);
  EXPECT_FALSE(s.mark_ready(2));  // not armed
  s.arm({}, /*launch=*/false);
  EXPECT_FALSE(s.mark_ready(0));
  EXPECT_FALSE(s.mark_ready(1));
  EXPECT_TRUE(s.mark_ready(2));
  EXPECT_EQ(accumulated, (std::vector<size_t>{1, 0}));
  EXPECT_TRUE(fake.log.empty());
}

TEST(ReductionScheduler, FollowUpsRunAfterEveryGroupAndNameTheirStage) {
  Fake fake;
  ReductionScheduler* self = nullptr;
  ReductionCallbacks cb = fake.callbacks();
  auto launch = cb.launch;
  cb.launch = [&, launch](size_t g) {
    BucketReduction r = launch(g);
    r.finish = [&, g, finish = r.finish] {
      finish();
      std::exception_ptr error;
      if (g == 1) error = std::make_exception_ptr(TimeoutError("too slow"));
      self->then(g, BucketReduction{Work::completed("all_reduce", error),
                                    [&, g] { fake.log.push_back(fmt::format("then {}", g)); }, 1});
    };
    return r;
  };
  ReductionScheduler s(names(3), {{2}, {1}, {0}}, options(), cb);
  self = &s;
  s.arm();
  EXPECT_TRUE(s.mark_all_ready());
  try {
    s.wait_all();
    FAIL() << "wait_all did not throw";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("group 1 stage 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fake.log, (std::vector<std::string>{"launch 0", "launch 1", "launch 2", "finish 0",
                                                "finish 1", "finish 2", "then 0"}));
}

TEST(ReductionScheduler, NoGroupsCompleteAtOnce) {
  Fake fake;
  ReductionScheduler s({}, {}, options(), fake.callbacks());
  s.arm();
  EXPECT_TRUE(s.mark_all_ready());
  s.wait_all();
  EXPECT_EQ(s.num_completed(), 1);
}

TEST(ReductionScheduler, RejectsAKeyInTwoGroups) {
  Fake fake;
  EXPECT_THROW(ReductionScheduler(names(2), {{0, 1}, {1}}, options(), fake.callbacks()),
               InvalidArgument);
  EXPECT_THROW(ReductionScheduler(names(2), {{0, 2}}, options(), fake.callbacks()),
               InvalidArgument);
}

}  // namespace
}  // namespace cohort::parallel
