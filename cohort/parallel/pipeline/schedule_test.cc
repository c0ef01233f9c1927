#include "cohort/parallel/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cohort/base/error.h"

namespace cohort::parallel::pipeline {
namespace {

std::string error_of(const SchedulePlan& plan) {
  try {
    validate_schedule(plan);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineSchedule, ParseAndName) {
  for (Schedule s :
       {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZeroBubbleH1})
    EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  try {
    parse_schedule("pipedream");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("gpipe, 1f1b, interleaved or zb-h1"), std::string::npos);
  }
}

TEST(PipelineSchedule, EveryGeneratorValidates) {
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kZeroBubbleH1}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 4, 7, 8, 16}) {
        SchedulePlan plan = make_schedule(s, p, m);
        EXPECT_EQ(error_of(plan), "") << plan.describe();
      }
    }
  }
  for (int p : {1, 2, 3, 4}) {
    for (int v : {1, 2, 3}) {
      for (int k : {1, 2, 3, 4}) {
        SchedulePlan plan = make_schedule(Schedule::kInterleaved, p, p * k, v);
        EXPECT_EQ(error_of(plan), "") << plan.describe();
      }
    }
  }
  for (int p : {1, 2, 4})
    for (int v : {1, 2})
      for (int m : {1, 3, 5}) EXPECT_EQ(error_of(make_forward_schedule(p, m, v)), "");
}

TEST(PipelineSchedule, InterleavedNeedsMultipleOfRanks) {
  try {
    make_schedule(Schedule::kInterleaved, 4, 6);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("multiple of the pipeline ranks (4)"), std::string::npos) << m;
    EXPECT_NE(m.find("8 micro-batches"), std::string::npos) << m;
  }
  EXPECT_THROW(make_schedule(Schedule::k1F1B, 2, 4, 2), InvalidArgument);
  EXPECT_EQ(make_schedule(Schedule::kInterleaved, 2, 4).chunks, 2);
}

TEST(PipelineSchedule, OneFOneBShape) {
  // p 4, m 8: rank 0 warms up with 3 forwards; the last rank alternates at once.
  SchedulePlan plan = make_schedule(Schedule::k1F1B, 4, 8);
  std::vector<Action> computes;
  for (const Action& a : plan.actions[0])
    if (!a.is_comm()) computes.push_back(a);
  ASSERT_EQ(computes.size(), 16u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(computes[static_cast<size_t>(i)].kind, ActionKind::kForward);
  EXPECT_EQ(computes[4].kind, ActionKind::kBackward);
  EXPECT_EQ(computes[4].mb, 0);
}

TEST(PipelineSchedule, ValidationRejectsAMissingReceive) {
  SchedulePlan plan = make_schedule(Schedule::k1F1B, 2, 4);
  auto& r1 = plan.actions[1];
  auto it = std::find_if(r1.begin(), r1.end(),
                         [](const Action& a) { return a.kind == ActionKind::kRecvForward; });
  ASSERT_NE(it, r1.end());
  r1.erase(it);
  std::string m = error_of(plan);
  EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("F(mb 0, chunk 0)"), std::string::npos) << m;
}

TEST(PipelineSchedule, ValidationRejectsADeadlock) {
  // Rank 0 moves its first RECV_B
  // before its first SEND_F; both then wait (rank 1 needs the activation).
  SchedulePlan plan = make_schedule(Schedule::k1F1B, 2, 2);
  auto& r0 = plan.actions[0];
  auto send = std::find_if(r0.begin(), r0.end(),
                           [](const Action& a) { return a.kind == ActionKind::kSendForward; });
  auto recv = std::find_if(r0.begin(), r0.end(),
                           [](const Action& a) { return a.kind == ActionKind::kRecvBackward; });
  ASSERT_TRUE(send != r0.end() && recv != r0.end());
  Action moved = *recv;
  r0.erase(recv);
  r0.insert(r0.begin(), moved);
  std::string m = error_of(plan);
  EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 0 at action 0 (RECV_B(mb 0, chunk 0, from rank 1))"), std::string::npos)
      << m;
}

TEST(PipelineSchedule, ValidationRejectsSwappedSendOrder) {
  // Rank 0 sends micro-batch 1 before 0: rank 1 receives them the other way.
  SchedulePlan plan = make_schedule(Schedule::kGPipe, 2, 2);
  auto& r0 = plan.actions[0];
  std::vector<size_t> sends;
  for (size_t i = 0; i < r0.size(); ++i)
    if (r0[i].kind == ActionKind::kSendForward) sends.push_back(i);
  ASSERT_EQ(sends.size(), 2u);
  // Move both sends after both forwards, swapped.
  Action s0 = r0[sends[0]], s1 = r0[sends[1]];
  r0.erase(r0.begin() + static_cast<std::ptrdiff_t>(sends[1]));
  r0.erase(r0.begin() + static_cast<std::ptrdiff_t>(sends[0]));
  auto second_f = std::find_if(r0.begin(), r0.end(), [](const Action& a) {
    return a.kind == ActionKind::kForward && a.mb == 1;
  });
  r0.insert(second_f + 1, {s1, s0});
  std::string m = error_of(plan);
  EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("order differs"), std::string::npos) << m;
}

TEST(PipelineSchedule, ValidationRejectsBackwardBeforeForwardAndDuplicates) {
  SchedulePlan plan = make_schedule(Schedule::kGPipe, 1, 2);
  std::swap(plan.actions[0][0], plan.actions[0][2]);  // BW(0) first
  EXPECT_NE(error_of(plan).find("backward before its forward"), std::string::npos);
  plan = make_schedule(Schedule::kZeroBubbleH1, 1, 2);
  plan.actions[0].push_back(plan.actions[0].back());
  EXPECT_NE(error_of(plan).find("second"), std::string::npos);
}

TEST(PipelineSchedule, InFlightActivations) {
  for (int p : {2, 4}) {
    const int m = 8;
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(
          peak_in_flight(make_schedule(Schedule::kGPipe, p, m).actions[static_cast<size_t>(r)]), m);
      EXPECT_LE(
          peak_in_flight(make_schedule(Schedule::k1F1B, p, m).actions[static_cast<size_t>(r)]), p);
      EXPECT_LE(peak_in_flight(
                    make_schedule(Schedule::kZeroBubbleH1, p, m).actions[static_cast<size_t>(r)]),
                p);
    }
    EXPECT_EQ(peak_in_flight(make_schedule(Schedule::k1F1B, p, m).actions[0]), p);
  }
}

TEST(PipelineSchedule, BubbleFormulasAndSimulation) {
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction(Schedule::kGPipe, 4, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction(Schedule::k1F1B, 4, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction(Schedule::kInterleaved, 4, 8, 2), 3.0 / 19);
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction(Schedule::kZeroBubbleH1, 4, 8), 3.0 / 27);
  const int p = 4, m = 8;
  double gpipe = simulated_bubble_fraction(make_schedule(Schedule::kGPipe, p, m));
  double ofob = simulated_bubble_fraction(make_schedule(Schedule::k1F1B, p, m));
  double inter = simulated_bubble_fraction(make_schedule(Schedule::kInterleaved, p, m));
  double zb = simulated_bubble_fraction(make_schedule(Schedule::kZeroBubbleH1, p, m));
  EXPECT_NEAR(gpipe, 3.0 / 11, 1e-9);
  EXPECT_NEAR(ofob, 3.0 / 11, 1e-9);
  EXPECT_LT(inter, ofob);
  EXPECT_LT(zb, ofob * 0.6) << "zb-h1 " << zb << " vs 1f1b " << ofob;
  // The generated orders reach the textbook bubbles exactly on unit costs.
  EXPECT_NEAR(inter, theoretical_bubble_fraction(Schedule::kInterleaved, p, m, 2), 1e-9);
  EXPECT_NEAR(zb, theoretical_bubble_fraction(Schedule::kZeroBubbleH1, p, m), 1e-9);
}

}  // namespace
}  // namespace cohort::parallel::pipeline
