// validate_schedule (schedule.h): local order checks per rank, per-pair
// message order, and a rendezvous simulation that proves the plan finishes.
#include <map>
#include <set>
#include <tuple>

#include "cohort/base/error.h"
#include "cohort/parallel/pipeline/schedule.h"

namespace cohort::parallel::pipeline {

namespace {

[[noreturn]] void fail(const SchedulePlan& plan, int rank, size_t index, const Action& a,
                       const std::string& problem) {
  throw InvalidArgument(fmt::format("pipeline schedule {}: rank {} action {} ({}): {}",
                                    plan.describe(), rank, index, to_string(a), problem));
}

bool is_send(ActionKind k) {
  return k == ActionKind::kSendForward || k == ActionKind::kSendBackward;
}

// What one rank has done so far, per (stage, micro-batch).
struct Done {
  std::set<std::pair<int, int>> f, b, bw_full, w, recv_f, recv_b, send_f, send_b;
};

void check_rank(const SchedulePlan& plan, int r, Done& done) {
  const int S = plan.num_stages();
  const auto& list = plan.actions[static_cast<size_t>(r)];
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (a.mb < 0 || a.mb >= plan.micro_batches)
      fail(plan, r, i, a, fmt::format("micro-batch out of [0, {})", plan.micro_batches));
    if (a.chunk < 0 || a.chunk >= plan.chunks)
      fail(plan, r, i, a, fmt::format("chunk out of [0, {})", plan.chunks));
    const int s = plan.stage_of(r, a.chunk);
    const std::pair<int, int> key{s, a.mb};
    if (a.is_comm()) {
      const bool fwd = a.kind == ActionKind::kSendForward || a.kind == ActionKind::kRecvForward;
      // Forward data flows to s+1 (sent) / from s-1 (received); gradients the other way.
      const int other = (fwd == is_send(a.kind)) ? s + 1 : s - 1;
      if (other < 0 || other >= S)
        fail(plan, r, i, a, fmt::format("stage {} has no neighbour stage {}", s, other));
      if (a.peer != plan.rank_of_stage(other) || a.peer == r)
        fail(plan, r, i, a,
             fmt::format("peer should be rank {} (stage {}), which is not this rank",
                         plan.rank_of_stage(other), other));
      if (plan.forward_only && !fwd) fail(plan, r, i, a, "gradient transfer in a forward plan");
    }
    auto once = [&](std::set<std::pair<int, int>>& set, const char* what) {
      if (!set.insert(key).second) fail(plan, r, i, a, fmt::format("second {}", what));
    };
    // The input (F) or output gradient (backward) arrived: received, or made locally.
    auto input_ready = [&]() {
      if (s == 0) return true;
      if (plan.rank_of_stage(s - 1) == r) return done.f.count({s - 1, a.mb}) > 0;
      return done.recv_f.count(key) > 0;
    };
    auto grad_ready = [&]() {
      if (s == S - 1) return true;
      if (plan.rank_of_stage(s + 1) == r)
        return done.b.count({s + 1, a.mb}) > 0 || done.bw_full.count({s + 1, a.mb}) > 0;
      return done.recv_b.count(key) > 0;
    };
    switch (a.kind) {
      case ActionKind::kForward:
        if (!input_ready()) fail(plan, r, i, a, "forward before its input was received");
        once(done.f, "forward");
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        if (plan.forward_only) fail(plan, r, i, a, "backward in a forward plan");
        if (!done.f.count(key)) fail(plan, r, i, a, "backward before its forward");
        if (!grad_ready()) fail(plan, r, i, a, "backward before its output gradient was received");
        if (done.b.count(key) || done.bw_full.count(key)) fail(plan, r, i, a, "second backward");
        (a.kind == ActionKind::kBackward ? done.bw_full : done.b).insert(key);
        break;
      case ActionKind::kBackwardWeight:
        if (!done.b.count(key)) fail(plan, r, i, a, "W before its B");
        once(done.w, "W");
        break;
      case ActionKind::kSendForward:
        if (!done.f.count(key)) fail(plan, r, i, a, "sends an activation its forward has not made");
        once(done.send_f, "send of this activation");
        break;
      case ActionKind::kRecvForward:
        once(done.recv_f, "receive of this activation");
        break;
      case ActionKind::kSendBackward:
        if (!done.b.count(key) && !done.bw_full.count(key))
          fail(plan, r, i, a, "sends a gradient its backward has not made");
        once(done.send_b, "send of this gradient");
        break;
      case ActionKind::kRecvBackward:
        once(done.recv_b, "receive of this gradient");
        break;
    }
  }
  // Completeness: every chunk of this rank saw every micro-batch.
  for (int c = 0; c < plan.chunks; ++c) {
    const int s = plan.stage_of(r, c);
    for (int mb = 0; mb < plan.micro_batches; ++mb) {
      const std::pair<int, int> key{s, mb};
      auto missing = [&](const char* what) {
        fail(plan, r, list.size(), Action{ActionKind::kForward, mb, c, -1},
             fmt::format("(end of list) no {} for micro-batch {} chunk {}", what, mb, c));
      };
      if (!done.f.count(key)) missing("forward");
      const bool remote_prev = s > 0 && plan.rank_of_stage(s - 1) != r;
      const bool remote_next = s + 1 < S && plan.rank_of_stage(s + 1) != r;
      if (remote_prev && !done.recv_f.count(key)) missing("RECV_F");
      if (remote_next && !done.send_f.count(key)) missing("SEND_F");
      if (plan.forward_only) continue;
      if (!done.bw_full.count(key) && !done.b.count(key)) missing("backward");
      if (done.b.count(key) && !done.w.count(key)) missing("W after its B");
      if (remote_next && !done.recv_b.count(key)) missing("RECV_B");
      if (remote_prev && !done.send_b.count(key)) missing("SEND_B");
    }
  }
}

// Per ordered pair of ranks, the sends of one must be the receives of the
// other, in the same order: (kind, micro-batch, receiving stage).
void check_pairs(const SchedulePlan& plan) {
  const int p = plan.ranks;
  using Msg = std::tuple<bool, int, int>;  // forward?, mb, receiving stage
  std::map<std::pair<int, int>, std::vector<std::pair<Msg, size_t>>> sends, recvs;
  for (int r = 0; r < p; ++r) {
    const auto& list = plan.actions[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (!a.is_comm()) continue;
      const int s = plan.stage_of(r, a.chunk);
      const bool fwd = a.kind == ActionKind::kSendForward || a.kind == ActionKind::kRecvForward;
      if (is_send(a.kind))
        sends[{r, a.peer}].push_back({Msg{fwd, a.mb, fwd ? s + 1 : s - 1}, i});
      else
        recvs[{a.peer, r}].push_back({Msg{fwd, a.mb, s}, i});
    }
  }
  for (int from = 0; from < p; ++from) {
    for (int to = 0; to < p; ++to) {
      const auto& sv = sends[{from, to}];
      const auto& rv = recvs[{from, to}];
      for (size_t k = 0; k < std::max(sv.size(), rv.size()); ++k) {
        if (k >= rv.size()) {
          const Action& a = plan.actions[static_cast<size_t>(from)][sv[k].second];
          fail(plan, from, sv[k].second, a,
               fmt::format("rank {} has no matching receive (it receives {} messages from rank "
                           "{}, this is send {})",
                           to, rv.size(), from, k));
        }
        if (k >= sv.size()) {
          const Action& a = plan.actions[static_cast<size_t>(to)][rv[k].second];
          fail(plan, to, rv[k].second, a,
               fmt::format("rank {} has no matching send (it sends {} messages to rank {}, this "
                           "is receive {})",
                           from, sv.size(), to, k));
        }
        if (sv[k].first != rv[k].first) {
          const Action& a = plan.actions[static_cast<size_t>(to)][rv[k].second];
          const Action& b = plan.actions[static_cast<size_t>(from)][sv[k].second];
          fail(plan, to, rv[k].second, a,
               fmt::format("receive {} from rank {} meets {} (its action {}): the per-pair "
                           "order differs",
                           k, from, to_string(b), sv[k].second));
        }
      }
    }
  }
}

// Every rank runs its list; computes always proceed, a send and its receive
// proceed together only when both ranks stand at them (rendezvous).
void check_deadlock(const SchedulePlan& plan) {
  const int p = plan.ranks;
  std::vector<size_t> at(static_cast<size_t>(p), 0);
  auto list = [&](int r) -> const std::vector<Action>& {
    return plan.actions[static_cast<size_t>(r)];
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      size_t& i = at[static_cast<size_t>(r)];
      while (i < list(r).size()) {
        const Action& a = list(r)[i];
        if (!a.is_comm()) {
          ++i;
          progress = true;
          continue;
        }
        const size_t j = at[static_cast<size_t>(a.peer)];
        if (j >= list(a.peer).size()) break;
        const Action& b = list(a.peer)[j];
        if (!b.is_comm() || b.peer != r || is_send(b.kind) == is_send(a.kind)) break;
        ++i;
        ++at[static_cast<size_t>(a.peer)];
        progress = true;
      }
    }
  }
  std::string stuck;
  int first = -1;
  for (int r = 0; r < p; ++r) {
    const size_t i = at[static_cast<size_t>(r)];
    if (i >= list(r).size()) continue;
    if (first < 0) first = r;
    stuck += fmt::format("{}rank {} at action {} ({})", stuck.empty() ? "" : ", ", r, i,
                         to_string(list(r)[i]));
  }
  if (first >= 0) {
    const size_t i = at[static_cast<size_t>(first)];
    fail(plan, first, i, list(first)[i],
         "deadlock with blocking send/recv: " + stuck + " wait for each other");
  }
}

}  // namespace

void validate_schedule(const SchedulePlan& plan) {
  COHORT_CHECK(plan.ranks >= 1 && plan.chunks >= 1 && plan.micro_batches >= 1,
               "pipeline schedule {}: ranks, chunks and micro-batches must be >= 1",
               plan.describe());
  COHORT_CHECK(plan.actions.size() == static_cast<size_t>(plan.ranks),
               "pipeline schedule {}: {} action lists for {} ranks", plan.describe(),
               plan.actions.size(), plan.ranks);
  for (int r = 0; r < plan.ranks; ++r) {
    Done done;
    check_rank(plan, r, done);
  }
  check_pairs(plan);
  check_deadlock(plan);
}

}  // namespace cohort::parallel::pipeline
