#include "cohort/collectives/op_table.h"

#include <fmt/format.h>

#include <cstdint>

#include "cohort/base/error.h"

namespace cohort::collectives {
namespace {

constexpr uint8_t bit(Algo a) { return static_cast<uint8_t>(1u << static_cast<unsigned>(a)); }

constexpr BufferRule kData{Extent::kCount, false, "data"};
constexpr BufferRule kSendCount{Extent::kCount, false, "send"};
constexpr BufferRule kSendWorld{Extent::kWorld, false, "send"};
constexpr BufferRule kRecvCount{Extent::kCount, false, "recv"};
constexpr BufferRule kRecvWorld{Extent::kWorld, false, "recv"};

constexpr OpInfo kTable[] = {
    {.kind = OpKind::kAllReduce,
     .name = "all_reduce",
     .wire_kind = OpKind::kAllReduce,
     .reduces = true,
     .recv = kData,
     .algorithms = bit(Algo::kDirect) | bit(Algo::kRing) | bit(Algo::kPull),
     .algo_env = "COHORT_ALLREDUCE_ALGO"},
    {.kind = OpKind::kBroadcast,
     .name = "broadcast",
     .wire_kind = OpKind::kBroadcast,
     .has_root = true,
     .recv = kData,
     .algorithms = bit(Algo::kFlat) | bit(Algo::kChain) | bit(Algo::kPull),
     .algo_env = "COHORT_BROADCAST_ALGO"},
    {.kind = OpKind::kReduce,
     .name = "reduce",
     .wire_kind = OpKind::kReduce,
     .has_root = true,
     .reduces = true,
     .recv = kData,
     .algorithms = bit(Algo::kDirect) | bit(Algo::kRing),
     .algo_env = "COHORT_REDUCE_ALGO"},
    {.kind = OpKind::kAllGather,
     .name = "all_gather",
     .wire_kind = OpKind::kAllGather,
     .send = kSendCount,
     .recv = kRecvWorld,
     .algorithms = bit(Algo::kDirect) | bit(Algo::kRing) | bit(Algo::kPull),
     .algo_env = "COHORT_ALLGATHER_ALGO"},
    {.kind = OpKind::kGather,
     .name = "gather",
     .wire_kind = OpKind::kGather,
     .has_root = true,
     .send = kSendCount,
     .recv = {Extent::kWorld, true, "recv"}},
    {.kind = OpKind::kScatter,
     .name = "scatter",
     .wire_kind = OpKind::kScatter,
     .has_root = true,
     .send = {Extent::kWorld, true, "send"},
     .recv = kRecvCount},
    {.kind = OpKind::kReduceScatter,
     .name = "reduce_scatter",
     .wire_kind = OpKind::kReduceScatter,
     .reduces = true,
     .send = kSendWorld,
     .recv = kRecvCount,
     .algorithms = bit(Algo::kDirect) | bit(Algo::kRing),
     .algo_env = "COHORT_REDUCE_SCATTER_ALGO"},
    {.kind = OpKind::kAllToAll,
     .name = "all_to_all",
     .wire_kind = OpKind::kAllToAll,
     .send = kSendWorld,
     .recv = kRecvWorld},
    {.kind = OpKind::kBarrier, .name = "barrier", .wire_kind = OpKind::kBarrier},
    {.kind = OpKind::kSend,
     .name = "send",
     .wire_kind = OpKind::kSend,
     .collective = false,
     .has_peer = true,
     .has_tag = true,
     .send = kData},
    // A recv checks the header of the matching send.
    {.kind = OpKind::kRecv,
     .name = "recv",
     .wire_kind = OpKind::kSend,
     .collective = false,
     .has_peer = true,
     .has_tag = true,
     .recv = kData},
    // A recv from whichever peer's matching send arrives first (its header
    // is a send's, as for recv); OpArgs::root is unused.
    {.kind = OpKind::kRecvAny,
     .name = "recv_any",
     .wire_kind = OpKind::kSend,
     .collective = false,
     .has_tag = true,
     .recv = kData},
    {.kind = OpKind::kAllToAllV,
     .name = "all_to_all_v",
     .wire_kind = OpKind::kAllToAllV,
     .send = {Extent::kCounts, false, "send"},
     .recv = {Extent::kCounts, false, "recv"}},
};

constexpr size_t kRows = sizeof(kTable) / sizeof(kTable[0]);
static_assert(kRows + 1 == kNumOpKinds, "one row per OpKind");

constexpr bool rows_in_order() {
  for (size_t i = 0; i < kRows; ++i) {
    if (static_cast<size_t>(kTable[i].kind) != i + 1) return false;
  }
  return true;
}
static_assert(rows_in_order(), "row i describes OpKind i + 1");

size_t sum_counts(const size_t* counts, int size) {
  size_t n = 0;
  for (int i = 0; counts != nullptr && i < size; ++i) n += counts[i];
  return n;
}

size_t elements_of(const BufferRule& b, const OpArgs& a, const size_t* counts, int size) {
  return b.extent == Extent::kCounts ? sum_counts(counts, size) : b.elements(a.count, size);
}

// What a reduction needs of the dtype, as a sentence for the error.
const char* what_reduction_needs(ReduceOp op) {
  return is_bitwise(op) ? "an integer or bool dtype" : "a dtype other than bool";
}

void check_buffer(const char* op, const BufferRule& b, const void* p, size_t count) {
  COHORT_CHECK(p != nullptr || count == 0, "{}: {}{} is null but count is {}", op, b.name,
               b.root_only ? " (on root)" : "", count);
}

// Out-of-place ops need disjoint buffers (the algorithms read one while
// writing the other).
void check_disjoint(const char* op, const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return;
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  COHORT_CHECK(pa + a_bytes <= pb || pb + b_bytes <= pa,
               "{}: send and recv buffers overlap (send [{:#x}, +{}), recv [{:#x}, +{})); "
               "out-of-place ops need separate buffers",
               op, pa, a_bytes, pb, b_bytes);
}

}  // namespace

const OpInfo& op_info(OpKind kind) {
  auto i = static_cast<size_t>(kind);
  if (i == 0 || i > kRows) {
    throw InvalidArgument(fmt::format("collectives: {} is not an op", static_cast<int>(i)));
  }
  return kTable[i - 1];
}

const OpInfo* op_table_begin() { return kTable; }
const OpInfo* op_table_end() { return kTable + kRows; }

const char* op_kind_name(OpKind kind) {
  auto i = static_cast<size_t>(kind);
  return i == 0 || i > kRows ? "unknown op" : kTable[i - 1].name;
}

const char* algo_name(Algo algo) {
  static constexpr const char* kNames[kNumAlgos] = {"-", "direct", "ring", "flat", "chain", "pull"};
  auto i = static_cast<size_t>(algo);
  return i < kNumAlgos ? kNames[i] : "unknown";
}

Algo parse_algo(OpKind kind, std::string_view text, std::string_view what) {
  const OpInfo& info = op_info(kind);
  if (text.empty()) return Algo::kNone;
  std::string list;
  for (int a = 1; a < kNumAlgos; ++a) {
    if ((info.algorithms & bit(static_cast<Algo>(a))) == 0) continue;
    if (text == algo_name(static_cast<Algo>(a))) return static_cast<Algo>(a);
    list += std::string(list.empty() ? "" : "|") + algo_name(static_cast<Algo>(a));
  }
  throw InvalidArgument(
      list.empty() ? fmt::format("{}={}: {} has no algorithm to choose", what, text, info.name)
                   : fmt::format("{}={}: expected one of {}", what, text, list));
}

AlgoOverrides& AlgoOverrides::set(OpKind kind, Algo algo) {
  const OpInfo& info = op_info(kind);
  COHORT_CHECK(algo == Algo::kNone || (info.algorithms & bit(algo)) != 0,
               "AlgoOverrides: {} has no algorithm '{}'", info.name, algo_name(algo));
  algo_[static_cast<size_t>(kind)] = algo;
  return *this;
}

size_t send_elements(const OpArgs& a, int size) {
  return elements_of(op_info(a.kind).send, a, a.send_counts, size);
}

size_t recv_elements(const OpArgs& a, int size) {
  return elements_of(op_info(a.kind).recv, a, a.recv_counts, size);
}

OpArgs with_one_buffer(OpArgs a, void* data, size_t count, DataType dtype) {
  const OpInfo& info = op_info(a.kind);
  COHORT_CHECK((info.send.extent == Extent::kNone) != (info.recv.extent == Extent::kNone),
               "{} takes two buffers, not one", info.name);
  if (info.send.extent != Extent::kNone) {
    a.send = data;
  } else {
    a.recv = data;
  }
  a.count = count;
  a.dtype = dtype;
  return a;
}

void check_op_args(const OpArgs& a, int rank, int size, const std::string& group) {
  const OpInfo& info = op_info(a.kind);
  const char* op = info.name;
  if (info.has_root) {
    COHORT_CHECK(a.root >= 0 && a.root < size,
                 "{}: root must be a rank of group '{}' in [0, {}), got {}", op, group, size,
                 a.root);
  }
  if (info.has_peer) {
    COHORT_CHECK(a.root >= 0 && a.root < size,
                 "{}: peer must be a rank of group '{}' in [0, {}), got {}", op, group, size,
                 a.root);
    COHORT_CHECK(a.root != rank, "{}: rank {} cannot {} itself (group '{}')", op, rank,
                 a.kind == OpKind::kSend ? "send to" : "receive from", group);
  }
  if (a.kind == OpKind::kRecvAny) {
    COHORT_CHECK(size > 1, "{}: rank {} has no peer to receive from (group '{}' has size {})", op,
                 rank, group, size);
  }
  if (info.reduces) {
    COHORT_CHECK(static_cast<int>(a.op) < kNumReduceOps, "{}: {} is not a reduction", op,
                 static_cast<int>(a.op));
    COHORT_CHECK(reduction_defined(a.op, a.dtype), "{}: reduction '{}' needs {}, got {}", op,
                 reduce_op_name(a.op), what_reduction_needs(a.op), dtype_name(a.dtype));
  }
  const bool per_rank = info.send.extent == Extent::kCounts;
  if (per_rank) {
    COHORT_CHECK(a.send_counts != nullptr && a.recv_counts != nullptr,
                 "{}: send_counts and recv_counts must each hold {} counts (one per rank of "
                 "group '{}'), got {} and {}",
                 op, size, group, a.send_counts ? "an array" : "null",
                 a.recv_counts ? "an array" : "null");
    const auto r = static_cast<size_t>(rank);
    COHORT_CHECK(a.send_counts[r] == a.recv_counts[r],
                 "{}: rank {} of group '{}' sends {} elements to itself (send_counts[{}]) but "
                 "expects {} from itself (recv_counts[{}])",
                 op, rank, group, a.send_counts[r], rank, a.recv_counts[r], rank);
  }
  const bool on_root = info.has_root && rank == a.root;
  const bool send_used = info.send.extent != Extent::kNone && (!info.send.root_only || on_root);
  const bool recv_used = info.recv.extent != Extent::kNone && (!info.recv.root_only || on_root);
  const size_t send_n = send_used ? elements_of(info.send, a, a.send_counts, size) : 0;
  const size_t recv_n = recv_used ? elements_of(info.recv, a, a.recv_counts, size) : 0;
  if (send_used) check_buffer(op, info.send, a.send, per_rank ? send_n : a.count);
  if (recv_used) check_buffer(op, info.recv, a.recv, per_rank ? recv_n : a.count);
  if (send_used && recv_used) {
    const size_t es = element_size(a.dtype);
    check_disjoint(op, a.send, send_n * es, a.recv, recv_n * es);
  }
}

}  // namespace cohort::collectives
