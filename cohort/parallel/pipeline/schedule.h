// Pipeline schedules as data: for each rank of a pipeline group, the list of
// actions it runs in one training step. One runtime (pipeline.h) executes any
// schedule; the generators below only decide the order.
//
// Stages: the model is cut into S = p * v stages (p ranks, v virtual stages
// or "chunks" per rank). Rank r holds stages r, r + p, r + 2p, ...: chunk c of
// rank r is stage c * p + r. Micro-batch mb goes through stages 0 .. S-1
// forward and S-1 .. 0 backward.
//
// Actions: F(mb, c) forward; BW(mb, c) full backward; B(mb, c) input gradient
// only and W(mb, c) weight gradient only (the split that zero-bubble schedules
// use); SEND_F/RECV_F an activation and SEND_B/RECV_B its gradient, to or from
// `peer` (a rank of the pipeline group), named by the micro-batch and the
// local chunk (the chunk on this rank whose data leaves or arrives). Stages
// that follow each other on the same rank (p == 1) hand over locally, without
// send/recv actions.
//
// Communication order: the generators simulate the step with unit costs
// (F = B = W = 1, BW = 2) and place each transfer at the time its producer
// ends, on both ranks; sorting every rank's list by that one global order
// makes the schedule deadlock-free even when send and recv both block until
// the peer arrives (rendezvous). validate_schedule proves it for any plan.
//
// Thread safety: plain values; the functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::parallel::pipeline {

enum class Schedule {
  kGPipe,         // all forwards, then all backwards (m activations in flight)
  k1F1B,          // PipeDream-flush: p-1-r warm-up forwards, then one forward one backward
  kInterleaved,   // Megatron-LM's interleaved 1F1B over v chunks per rank (m % p == 0)
  kZeroBubbleH1,  // ZB-H1 (Qi et al. 2024): backward split into B and W, W's fill the bubble
};

// "gpipe", "1f1b", "interleaved", "zb-h1"; InvalidArgument listing them otherwise.
Schedule parse_schedule(std::string_view name);
std::string_view schedule_name(Schedule schedule);

enum class ActionKind : uint8_t {
  kForward,         // F
  kBackward,        // BW: input and weight gradients together
  kBackwardInput,   // B: input gradient only (the weight half is kept for W)
  kBackwardWeight,  // W: weight gradient of a micro-batch whose B ran
  kSendForward,     // SEND_F: this chunk's output for mb to peer
  kRecvForward,     // RECV_F: this chunk's input for mb from peer
  kSendBackward,    // SEND_B: the gradient of this chunk's input to peer
  kRecvBackward,    // RECV_B: the gradient of this chunk's output from peer
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int mb = 0;
  int chunk = 0;
  int peer = -1;  // pipeline rank, for the four communication kinds

  bool is_comm() const { return kind >= ActionKind::kSendForward; }
  bool operator==(const Action&) const = default;
};

// "F(mb 3, chunk 0)", "SEND_F(mb 3, chunk 0, to rank 1)".
std::string to_string(const Action& action);
std::string_view kind_name(ActionKind kind);  // "F", "BW", "B", "W", "SEND_F", ...

struct SchedulePlan {
  Schedule schedule = Schedule::k1F1B;
  int ranks = 1;          // p
  int chunks = 1;         // v, virtual stages per rank
  int micro_batches = 1;  // m
  bool forward_only = false;
  std::vector<std::vector<Action>> actions;  // per rank

  int num_stages() const { return ranks * chunks; }
  int stage_of(int rank, int chunk) const { return chunk * ranks + rank; }
  int rank_of_stage(int stage) const { return stage % ranks; }
  int chunk_of_stage(int stage) const { return stage / ranks; }
  // "1f1b (p 4, v 1, m 8)"
  std::string describe() const;
};

// The virtual stages per rank a schedule uses when none is asked for (0):
// 2 for interleaved, 1 otherwise.
int default_chunks(Schedule schedule);

// The training step's actions for every rank. chunks 0 = default_chunks.
// InvalidArgument for p < 1, m < 1, chunks other than 1 for gpipe, 1f1b and
// zb-h1, and for interleaved with m % p != 0 (its micro-batches go round the
// ranks in groups of p) -- the message says which values would do.
SchedulePlan make_schedule(Schedule schedule, int ranks, int micro_batches, int chunks = 0);

// Inference: each micro-batch forward through every stage, no backward.
SchedulePlan make_forward_schedule(int ranks, int micro_batches, int chunks = 1);

// Checks every rank's list against the others (schedule_validation.cc):
// ranges and peers; each F after its input arrived, each backward after its
// F and its output gradient, W after B, sends after what they send; exactly
// one F and one backward (BW, or B and W) per micro-batch and chunk, and the
// transfers they need; per pair of ranks the sends and receives in the same
// order; and a simulation with blocking (rendezvous) send and recv that must
// finish. InvalidArgument naming the rank, the action index and the action.
void validate_schedule(const SchedulePlan& plan);

// ---- measures of a plan (for tests and benchmarks) ----

// Most micro-batches whose forward ran and whose backward (BW, or W) did not,
// on one rank's list: the activations that rank holds at its peak.
int peak_in_flight(const std::vector<Action>& actions);

struct ActionCosts {
  double forward = 1.0;
  double backward_input = 1.0;   // B
  double backward_weight = 1.0;  // W; BW costs B + W
};

// Runs the plan on a model of time (compute takes its cost, transfers none,
// a receive waits for its send) and returns the idle share of the ranks'
// time: 1 - busy / (p * makespan).
double simulated_bubble_fraction(const SchedulePlan& plan, const ActionCosts& costs = {});

// The textbook idle share of a step for equal stage costs (F = B = W):
//   gpipe, 1f1b:  (p-1) / (m + p - 1)
//   interleaved:  (p-1) / (v*m + p - 1)   (bubble/work = (p-1)/(v*m), Megatron-LM)
//   zb-h1:        (p-1) / (3m + p - 1)    (bubble (p-1)(F+B-W) against m(F+B+W))
double theoretical_bubble_fraction(Schedule schedule, int ranks, int micro_batches, int chunks = 1);

}  // namespace cohort::parallel::pipeline
