// The op table (op_table.h) and the knobs that read from it (knobs.h): every
// op has a row in order, the wire keeps its kinds, argument checks follow the
// buffers' rules, and env values become typed options or name the variable.
#include "cohort/collectives/op_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/collectives/knobs.h"
#include "cohort/collectives/wire.h"

namespace cohort::collectives {
namespace {

TEST(OpTable, HasOneRowPerOpInOrder) {
  int n = 0;
  for (const OpInfo* i = op_table_begin(); i != op_table_end(); ++i, ++n) {
    EXPECT_EQ(static_cast<int>(i->kind), n + 1);
    EXPECT_EQ(&op_info(i->kind), i);
    EXPECT_STREQ(op_kind_name(i->kind), i->name);
  }
  EXPECT_EQ(n + 1, kNumOpKinds);
  EXPECT_THROW(op_info(static_cast<OpKind>(0)), InvalidArgument);
  EXPECT_STREQ(op_kind_name(static_cast<OpKind>(200)), "unknown op");
}

TEST(OpTable, RecvChecksTheHeaderOfItsSend) {
  OpDesc recv{OpKind::kRecv, DataType::kFloat32, ReduceOp::kSum, Algo::kDirect, -1, 4, 7};
  OpDesc send = recv;
  send.kind = OpKind::kSend;
  WireHeader a = to_wire(recv), b = to_wire(send);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(describe(recv).rfind("recv #0 (count=4, dtype=float32, tag=7", 0), 0u)
      << describe(recv);
}

TEST(OpTable, RecvAnyExpectsASendsHeaderAndAPeer) {
  OpDesc any{OpKind::kRecvAny, DataType::kFloat32, ReduceOp::kSum, Algo::kDirect, -1, 4, 7};
  EXPECT_EQ(to_wire(any).kind, static_cast<uint8_t>(OpKind::kSend));
  EXPECT_EQ(describe(any).rfind("recv_any (count=4, dtype=float32, tag=7", 0), 0u) << describe(any);
  float buf[4] = {};
  OpArgs a{OpKind::kRecvAny, nullptr, buf, 4, DataType::kFloat32, ReduceOp::kSum, -1, 7};
  EXPECT_NO_THROW(check_op_args(a, 0, 2, "g"));                // root is unused: no peer to check
  EXPECT_THROW(check_op_args(a, 0, 1, "g"), InvalidArgument);  // nobody to receive from
  a.recv = nullptr;
  EXPECT_THROW(check_op_args(a, 1, 3, "g"), InvalidArgument);
  a.count = 0;
  EXPECT_NO_THROW(check_op_args(a, 1, 3, "g"));
}

TEST(OpTable, AllToAllVHeadersCarryTheirKind) {
  EXPECT_STREQ(op_kind_name(OpKind::kAllToAllV), "all_to_all_v");
  EXPECT_EQ(static_cast<int>(OpKind::kAllToAllV), kNumOpKinds - 1);
  EXPECT_EQ(op_info(OpKind::kAllToAllV).send.extent, Extent::kCounts);
  EXPECT_FALSE(op_info(OpKind::kAllToAllV).reduces);
  OpDesc d{OpKind::kAllToAllV, DataType::kInt8, ReduceOp::kSum, Algo::kDirect, -1, 9};
  EXPECT_EQ(describe(d).rfind("all_to_all_v #0 (count=9, dtype=int8, algo=direct)", 0), 0u)
      << describe(d);
}

TEST(OpTable, BufferSizesFollowCountAndWorld) {
  EXPECT_EQ(op_info(OpKind::kAllGather).recv.elements(5, 3), 15u);
  EXPECT_EQ(op_info(OpKind::kAllGather).send.elements(5, 3), 5u);
  EXPECT_EQ(op_info(OpKind::kReduceScatter).send.elements(5, 3), 15u);
  EXPECT_EQ(op_info(OpKind::kAllReduce).send.elements(5, 3), 0u);
  EXPECT_TRUE(op_info(OpKind::kGather).recv.root_only);
  EXPECT_TRUE(op_info(OpKind::kScatter).send.root_only);
}

TEST(OpTable, ChecksArgumentsByTheRules) {
  float a[6] = {}, b[6] = {};
  OpArgs gather{OpKind::kGather, a, nullptr, 2, DataType::kFloat32, ReduceOp::kSum, 1};
  EXPECT_NO_THROW(check_op_args(gather, 0, 3, "g"));  // recv is the root's alone
  EXPECT_THROW(check_op_args(gather, 1, 3, "g"), InvalidArgument);
  gather.root = 3;
  EXPECT_THROW(check_op_args(gather, 0, 3, "g"), InvalidArgument);
  OpArgs ag{OpKind::kAllGather, a, a + 1, 2, DataType::kFloat32};
  EXPECT_THROW(check_op_args(ag, 0, 3, "g"), InvalidArgument);  // overlap
  ag.recv = b;
  EXPECT_NO_THROW(check_op_args(ag, 0, 3, "g"));
  OpArgs send{OpKind::kSend, a, nullptr, 1, DataType::kFloat32, ReduceOp::kSum, 0};
  try {
    check_op_args(send, 0, 2, "g");
    ADD_FAILURE() << "send to itself accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("send: rank 0 cannot send to itself (group 'g')"),
              std::string::npos)
        << e.what();
  }
}

// The message of the InvalidArgument check_op_args throws for `a` ("" when none).
std::string refusal(const OpArgs& a, int rank = 0, int size = 2) {
  try {
    check_op_args(a, rank, size, "g");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(OpTable, ReductionMustSuitTheDtype) {
  int64_t buf[8] = {};
  for (OpKind kind : {OpKind::kAllReduce, OpKind::kReduce, OpKind::kReduceScatter}) {
    const OpInfo& info = op_info(kind);
    OpArgs a{kind, kind == OpKind::kReduceScatter ? buf : nullptr, buf + 4, 1};
    for (DataType dt :
         {DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16, DataType::kFloat16}) {
      for (ReduceOp op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
        a.dtype = dt;
        a.op = op;
        EXPECT_EQ(refusal(a),
                  fmt::format("{}: reduction '{}' needs an integer or bool dtype, got {}",
                              info.name, reduce_op_name(op), dtype_name(dt)));
      }
    }
    for (DataType dt :
         {DataType::kUInt8, DataType::kInt8, DataType::kInt32, DataType::kInt64, DataType::kBool}) {
      for (ReduceOp op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor, ReduceOp::kSum}) {
        a.dtype = dt;
        a.op = op;
        EXPECT_EQ(refusal(a), "") << info.name << " " << dtype_name(dt);
      }
    }
    a.dtype = DataType::kBool;
    a.op = ReduceOp::kAvg;
    EXPECT_EQ(refusal(a), fmt::format("{}: reduction 'avg' needs a dtype other than bool, got bool",
                                      info.name));
  }
  // Ops that do not reduce ignore the reduction.
  OpArgs bc{OpKind::kBroadcast, nullptr, buf, 1, DataType::kFloat32, ReduceOp::kBand};
  EXPECT_EQ(refusal(bc), "");
}

TEST(OpTable, AllToAllVChecksItsCountsAndBuffers) {
  int32_t send[6] = {}, recv[6] = {};
  const size_t sc[3] = {1, 0, 3}, rc[3] = {2, 0, 4};
  OpArgs a{OpKind::kAllToAllV, send, recv, 0, DataType::kInt32};
  EXPECT_NE(refusal(a, 1, 3).find("all_to_all_v: send_counts and recv_counts must each hold 3 "
                                  "counts (one per rank of group 'g'), got null and null"),
            std::string::npos)
      << refusal(a, 1, 3);
  a.send_counts = sc;
  a.recv_counts = rc;
  EXPECT_EQ(send_elements(a, 3), 4u);
  EXPECT_EQ(recv_elements(a, 3), 6u);
  EXPECT_EQ(refusal(a, 1, 3), "");
  // Its own block: send_counts[rank] must be recv_counts[rank].
  EXPECT_EQ(refusal(a, 0, 3),
            "all_to_all_v: rank 0 of group 'g' sends 1 elements to itself (send_counts[0]) but "
            "expects 2 from itself (recv_counts[0])");
  a.send = nullptr;
  EXPECT_NE(refusal(a, 1, 3).find("all_to_all_v: send is null but count is 4"), std::string::npos)
      << refusal(a, 1, 3);
  const size_t none[3] = {0, 0, 0};
  a.send_counts = none;
  a.recv_counts = none;
  EXPECT_EQ(refusal(a, 1, 3), "");  // nothing to send: null is fine
  // The buffers' extents are the sums of the counts: these overlap.
  a.send = send;
  a.recv = send + 3;
  a.send_counts = sc;
  a.recv_counts = rc;
  EXPECT_NE(refusal(a, 1, 3).find("send and recv buffers overlap"), std::string::npos);
  a.recv = recv;
  EXPECT_EQ(refusal(a, 1, 3), "");
}

TEST(Knobs, NameEveryAlgorithmVariable) {
  std::vector<std::string> names = knob_names();
  for (const char* n :
       {"COHORT_TRANSPORT", "COHORT_SPIN_US", "COHORT_ALLREDUCE_ALGO", "COHORT_BROADCAST_ALGO",
        "COHORT_REDUCE_ALGO", "COHORT_ALLGATHER_ALGO", "COHORT_REDUCE_SCATTER_ALGO"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

TEST(Knobs, BecomeTypedOptions) {
  TransportKind t = TransportKind::kAuto;
  CollectiveTuning tuning;
  apply_knobs({{"COHORT_TRANSPORT", "tcp"},
               {"COHORT_SPIN_US", "20"},
               {"COHORT_ALLREDUCE_ALGO", "pull"},
               {"COHORT_BROADCAST_ALGO", "chain"}},
              t, tuning);
  EXPECT_EQ(t, TransportKind::kTcp);
  EXPECT_EQ(tuning.spin, std::chrono::microseconds(20));
  EXPECT_EQ(tuning.algorithms.get(OpKind::kAllReduce), Algo::kPull);
  EXPECT_EQ(tuning.algorithms.get(OpKind::kBroadcast), Algo::kChain);
  EXPECT_EQ(tuning.algorithms.get(OpKind::kReduce), Algo::kNone);
  // An explicit transport wins over the environment's.
  TransportKind shm = TransportKind::kShm;
  apply_knobs({{"COHORT_TRANSPORT", "tcp"}}, shm, tuning);
  EXPECT_EQ(shm, TransportKind::kShm);
}

TEST(Knobs, NameTheVariableOfABadValue) {
  TransportKind t = TransportKind::kAuto;
  CollectiveTuning tuning;
  auto message = [&](std::map<std::string, std::string> env) {
    try {
      apply_knobs(env, t, tuning);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message({{"COHORT_ALLREDUCE_ALGO", "nonsense"}})
                .find("COHORT_ALLREDUCE_ALGO=nonsense: expected one of direct|ring|pull"),
            std::string::npos);
  EXPECT_NE(message({{"COHORT_REDUCE_ALGO", "pull"}}).find("expected one of direct|ring"),
            std::string::npos);
  EXPECT_NE(message({{"COHORT_TRANSPORT", "carrier-pigeon"}}).find("COHORT_TRANSPORT"),
            std::string::npos);
  EXPECT_NE(message({{"COHORT_SPIN_US", "-3"}}).find("COHORT_SPIN_US=-3"), std::string::npos);
  EXPECT_EQ(t, TransportKind::kAuto);  // nothing applied on failure
  EXPECT_EQ(tuning.spin, std::chrono::microseconds(1000));
  EXPECT_THROW(tuning.algorithms.set(OpKind::kGather, Algo::kRing), InvalidArgument);
}

}  // namespace
}  // namespace cohort::collectives
