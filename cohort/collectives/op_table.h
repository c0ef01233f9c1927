// The one table of cohort's ops: for each collective (and send/recv) its
// name, whether it has a root or a peer, whether it reduces, which buffers it
// takes and how their sizes follow from `count` and the world size, and which
// algorithms may be forced for it. Everything that used to spell out the list
// of ops reads it from here: argument checks (check_op_args, shared by the
// Communicator and the ProcessGroup), the flight recorder's and the wire
// header's names, the env knobs of the algorithm overrides (knobs.h), and the
// backends, which implement one entry point, run(const OpArgs&), with one
// case per op (native: Communicator::run; mpi/mpi_backend.cc).
//
// Adding an op: an OpKind, a row in op_table.cc, a case in each backend's
// run(), and typed forms on ProcessGroup if users should call it by name.
// Thread safety: constants and pure functions only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cohort/collectives/types.h"

namespace cohort::collectives {

// The ops. The values go on the wire (wire.h); a recv expects its send's
// header, so both travel as kSend (and so does recv_any, a recv from whichever
// peer's matching send arrives first: the sender calls an ordinary send).
enum class OpKind : uint8_t {
  kAllReduce = 1,
  kBroadcast,
  kReduce,
  kAllGather,
  kGather,
  kScatter,
  kReduceScatter,
  kAllToAll,
  kBarrier,
  kSend,
  kRecv,
  kRecvAny,
  kAllToAllV,  // uneven all_to_all: per-rank counts (OpArgs::send_counts, recv_counts)
};
inline constexpr int kNumOpKinds = 14;  // one past the largest OpKind value

// Algorithms. kNone: not forced, chosen by message and world size (and "-" on
// the wire for ops with a single algorithm).
enum class Algo : uint8_t { kNone = 0, kDirect, kRing, kFlat, kChain, kPull };
inline constexpr int kNumAlgos = 6;

// How many elements a buffer holds: none, count, size()*count, or the sum of
// the op's size() per-rank counts (kCounts: OpArgs::send_counts for the send
// buffer, recv_counts for recv; see send_elements / recv_elements).
enum class Extent : uint8_t { kNone, kCount, kWorld, kCounts };

struct BufferRule {
  Extent extent = Extent::kNone;
  bool root_only = false;  // used (and checked) on the root alone
  const char* name = "";   // "data", "send", "recv": for messages
  // kNone, kCount and kWorld (kCounts needs the OpArgs: send_elements).
  size_t elements(size_t count, int size) const {
    return extent == Extent::kNone    ? 0
           : extent == Extent::kCount ? count
                                      : count * static_cast<size_t>(size);
  }
};

struct OpInfo {
  OpKind kind;
  const char* name;           // "all_reduce": errors, flight recorder, Work, wire descriptions
  OpKind wire_kind;           // the kind its header carries
  bool collective = true;     // numbered by the group's sequence (send/recv are per pair)
  bool has_root = false;      // OpArgs::root is a root rank
  bool has_peer = false;      // OpArgs::root is the peer (send: dst, recv: src)
  bool reduces = false;       // OpArgs::op applies
  bool has_tag = false;       // OpArgs::tag applies
  BufferRule send{};          // OpArgs::send (in-place ops have none: their data is recv)
  BufferRule recv{};          // OpArgs::recv
  uint8_t algorithms = 0;     // bit (1 << Algo) for each algorithm that may be forced
  const char* algo_env = "";  // the environment knob that forces one ("" = none), read at the edge
};

// The row of `kind`; InvalidArgument for a value that names no op.
const OpInfo& op_info(OpKind kind);
// Every row, in OpKind order (for code that iterates the ops: knobs, tests).
const OpInfo* op_table_begin();
const OpInfo* op_table_end();

// "all_reduce", ..., "send", "recv", "recv_any".
const char* op_kind_name(OpKind kind);
// "-", "direct", "ring", "flat", "chain", "pull".
const char* algo_name(Algo algo);
// Parses an algorithm name allowed for `kind` ("" = kNone); InvalidArgument
// "<what>=<text>: expected one of <the op's algorithms>" otherwise.
Algo parse_algo(OpKind kind, std::string_view text, std::string_view what);

// Forced algorithms, by op (Algo::kNone: chosen by message and world size).
// Every rank of a group must force the same (a disagreement is reported as a
// mismatch). Pure data.
class AlgoOverrides {
 public:
  // InvalidArgument when `kind` offers no such algorithm (OpInfo::algorithms).
  AlgoOverrides& set(OpKind kind, Algo algo);
  Algo get(OpKind kind) const { return algo_[static_cast<size_t>(kind) % kNumOpKinds]; }

 private:
  Algo algo_[kNumOpKinds] = {};
};

// One call of an op on raw buffers: what every backend's run() receives.
// In-place ops (all_reduce, broadcast, reduce), recv and recv_any work on
// `recv`; send reads `send`. Shapes per op: see BufferRule (count is elements
// per rank).
// all_to_all_v ignores count: send_counts[j] elements go to rank j, taken
// consecutively from send (offsets are the prefix sums), recv_counts[i]
// arrive from rank i, stored consecutively in recv; each array holds size()
// counts, is borrowed (valid until the op ran) and is null for other ops.
struct OpArgs {
  OpKind kind = OpKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;  // root rank, or the peer of send/recv (unused by recv_any)
  uint32_t tag = 0;
  Duration timeout = kUseDefaultTimeout;
  // recv_any: where the backend writes the sender's rank once the message is
  // in (null: not wanted). Must outlive the op.
  int* source = nullptr;
  const size_t* send_counts = nullptr;  // all_to_all_v only
  const size_t* recv_counts = nullptr;  // all_to_all_v only
};

// Elements of a's send / recv buffer on a rank of a group of `size`: the
// op's BufferRule of a.count, or the sum of the counts for Extent::kCounts
// (all of them, whether or not this rank uses the buffer: see root_only).
size_t send_elements(const OpArgs& a, int size);
size_t recv_elements(const OpArgs& a, int size);

// `a` on one buffer of `count` elements of `dtype`, for the ops that take one
// (all_reduce, broadcast, reduce, recv, recv_any: recv; send: send).
OpArgs with_one_buffer(OpArgs a, void* data, size_t count, DataType dtype);

// The caller-side checks of one op on rank `rank` of a group of `size` named
// `group`: root or peer in range (and not this rank for send/recv), a peer to
// receive from at all for recv_any (size > 1), the reduction defined on the
// dtype (bitwise ones need an integer or bool dtype, avg is not defined on
// bool: reduction_defined in types.h), all_to_all_v's count arrays present,
// buffers non-null when they hold elements on the ranks that use them, and
// the two buffers of an out-of-place op disjoint. InvalidArgument naming the
// op otherwise.
void check_op_args(const OpArgs& a, int rank, int size, const std::string& group);

}  // namespace cohort::collectives
