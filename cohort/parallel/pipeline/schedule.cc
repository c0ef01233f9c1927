#include "cohort/parallel/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <tuple>

#include "cohort/base/error.h"

namespace cohort::parallel::pipeline {

namespace {

struct NamedSchedule {
  std::string_view name;
  Schedule schedule;
};
constexpr NamedSchedule kSchedules[] = {{"gpipe", Schedule::kGPipe},
                                        {"1f1b", Schedule::k1F1B},
                                        {"interleaved", Schedule::kInterleaved},
                                        {"zb-h1", Schedule::kZeroBubbleH1}};

using Order = std::vector<Action>;  // one rank's compute actions, in order

Action compute(ActionKind kind, int mb, int chunk) { return Action{kind, mb, chunk, -1}; }

// GPipe: every forward, then every backward (in micro-batch order).
std::vector<Order> gpipe_orders(int p, int m) {
  std::vector<Order> orders(static_cast<size_t>(p));
  for (auto& o : orders) {
    for (int mb = 0; mb < m; ++mb) o.push_back(compute(ActionKind::kForward, mb, 0));
    for (int mb = 0; mb < m; ++mb) o.push_back(compute(ActionKind::kBackward, mb, 0));
  }
  return orders;
}

// 1F1B: rank r runs min(p-1-r, m) forwards, then alternates one forward and
// one backward, then drains the backwards. `backward` is BW, or B for ZB-H1
// (whose W's the simulation places).
std::vector<Order> one_f_one_b_orders(int p, int m, ActionKind backward) {
  std::vector<Order> orders(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    Order& o = orders[static_cast<size_t>(r)];
    const int warmup = std::min(p - 1 - r, m);
    for (int mb = 0; mb < warmup; ++mb) o.push_back(compute(ActionKind::kForward, mb, 0));
    for (int mb = warmup; mb < m; ++mb) {
      o.push_back(compute(ActionKind::kForward, mb, 0));
      o.push_back(compute(backward, mb - warmup, 0));
    }
    for (int mb = m - warmup; mb < m; ++mb) o.push_back(compute(backward, mb, 0));
  }
  return orders;
}

// Megatron-LM's interleaved 1F1B (schedules.py,
// forward_backward_pipelining_with_interleaving): the k-th forward of a rank
// is micro-batch (k / (p v)) p + k % p on chunk (k % (p v)) / p; backwards
// walk the chunks in reverse. Warm-up: (p-r-1)*2 + (v-1)*p forwards.
std::vector<Order> interleaved_orders(int p, int m, int v) {
  const int total = m * v;
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto chunk_f = [&](int k) { return (k % (p * v)) / p; };
  auto chunk_b = [&](int k) { return v - 1 - (k % (p * v)) / p; };
  std::vector<Order> orders(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    Order& o = orders[static_cast<size_t>(r)];
    const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k)
      o.push_back(compute(ActionKind::kForward, mb_of(k), chunk_f(k)));
    for (int k = 0; k < total - warmup; ++k) {
      const int kf = k + warmup;
      o.push_back(compute(ActionKind::kForward, mb_of(kf), chunk_f(kf)));
      o.push_back(compute(ActionKind::kBackward, mb_of(k), chunk_b(k)));
    }
    for (int k = total - warmup; k < total; ++k)
      o.push_back(compute(ActionKind::kBackward, mb_of(k), chunk_b(k)));
  }
  return orders;
}

std::vector<Order> forward_orders(int p, int m, int v) {
  std::vector<Order> orders(static_cast<size_t>(p));
  for (int mb = 0; mb < m; ++mb)
    for (int c = 0; c < v; ++c)
      for (auto& o : orders) o.push_back(compute(ActionKind::kForward, mb, c));
  return orders;
}

// A compute action placed on the simulated time line.
struct Timed {
  Action action;
  int64_t start;
  int64_t end;
};

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// List scheduling of the ranks' orders with unit costs. With fill_w (ZB-H1),
// W's are not in the orders: a rank runs a pending W whenever its next action
// must wait, and before a forward that would hold more than p micro-batches
// whose W has not run (1F1B's activation memory); the rest run at the end.
std::vector<std::vector<Timed>> simulate_orders(const SchedulePlan& plan,
                                                const std::vector<Order>& orders, bool fill_w) {
  const int p = plan.ranks, m = plan.micro_batches, S = plan.num_stages();
  auto idx = [&](int stage, int mb) { return static_cast<size_t>(stage) * m + mb; };
  std::vector<int64_t> f_end(static_cast<size_t>(S) * m, kNever);
  std::vector<int64_t> b_end(static_cast<size_t>(S) * m, kNever);
  struct RankState {
    size_t next = 0;
    int64_t t = 0;
    std::deque<Action> pending_w;
    int f_done = 0, w_done = 0;
  };
  std::vector<RankState> st(static_cast<size_t>(p));
  std::vector<std::vector<Timed>> out(static_cast<size_t>(p));
  auto cost = [](ActionKind k) { return k == ActionKind::kBackward ? 2 : 1; };
  // When the inputs of a (not W) compute action are ready; kNever while unknown.
  auto ready_at = [&](int r, const Action& a) -> int64_t {
    const int s = plan.stage_of(r, a.chunk);
    if (a.kind == ActionKind::kForward) return s == 0 ? 0 : f_end[idx(s - 1, a.mb)];
    int64_t t = f_end[idx(s, a.mb)];
    if (s + 1 < S) t = std::max(t, b_end[idx(s + 1, a.mb)]);
    return t;
  };
  for (;;) {
    int best = -1;
    int64_t best_start = kNever;
    bool best_is_w = false;
    bool all_done = true;
    for (int r = 0; r < p; ++r) {
      RankState& rs = st[static_cast<size_t>(r)];
      const Order& order = orders[static_cast<size_t>(r)];
      const bool main_left = rs.next < order.size();
      if (!main_left && rs.pending_w.empty()) continue;
      all_done = false;
      int64_t start = kNever;
      bool is_w = false;
      if (main_left) {
        const Action& a = order[rs.next];
        const int64_t ready = ready_at(r, a);
        const bool forced_w = fill_w && a.kind == ActionKind::kForward && !rs.pending_w.empty() &&
                              rs.f_done - rs.w_done >= p;
        if (!forced_w && ready <= rs.t) {
          start = rs.t;
        } else if (!rs.pending_w.empty()) {
          start = rs.t;
          is_w = true;
        } else if (ready != kNever) {
          start = ready;
        }
      } else {
        start = rs.t;
        is_w = true;
      }
      if (start < best_start) {
        best = r;
        best_start = start;
        best_is_w = is_w;
      }
    }
    if (all_done) break;
    if (best < 0)
      throw Error(fmt::format("pipeline schedule {}: the generated order cannot run (a bug)",
                              plan.describe()));
    RankState& rs = st[static_cast<size_t>(best)];
    Action a;
    if (best_is_w) {
      a = rs.pending_w.front();
      rs.pending_w.pop_front();
      ++rs.w_done;
    } else {
      a = orders[static_cast<size_t>(best)][rs.next++];
    }
    const int64_t end = best_start + cost(a.kind);
    const int s = plan.stage_of(best, a.chunk);
    if (a.kind == ActionKind::kForward) {
      f_end[idx(s, a.mb)] = end;
      ++rs.f_done;
    } else if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput) {
      b_end[idx(s, a.mb)] = end;
      if (a.kind == ActionKind::kBackwardInput && fill_w)
        rs.pending_w.push_back(compute(ActionKind::kBackwardWeight, a.mb, a.chunk));
    }
    rs.t = end;
    out[static_cast<size_t>(best)].push_back(Timed{a, best_start, end});
  }
  return out;
}

// Adds the transfers to the simulated compute actions and orders every rank's
// list by one global key: (time, transfers before computes, rank, index).
// Both ends of a transfer share its key, so running the actions in key order
// is an execution in which every send meets its receive: no deadlock.
void place_transfers(SchedulePlan& plan, const std::vector<std::vector<Timed>>& timed) {
  const int p = plan.ranks, S = plan.num_stages();
  using Key = std::tuple<int64_t, int, int, size_t, int>;
  std::vector<std::vector<std::pair<Key, Action>>> lists(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < timed[static_cast<size_t>(r)].size(); ++i) {
      const Timed& t = timed[static_cast<size_t>(r)][i];
      const Action& a = t.action;
      lists[static_cast<size_t>(r)].push_back({Key{t.start, 1, r, i, 0}, a});
      const int s = plan.stage_of(r, a.chunk);
      int to_stage = -1;
      ActionKind send = ActionKind::kSendForward, recv = ActionKind::kRecvForward;
      if (a.kind == ActionKind::kForward && s + 1 < S) {
        to_stage = s + 1;
      } else if ((a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput) &&
                 s > 0) {
        to_stage = s - 1;
        send = ActionKind::kSendBackward;
        recv = ActionKind::kRecvBackward;
      }
      if (to_stage < 0) continue;
      const int peer = plan.rank_of_stage(to_stage);
      if (peer == r) continue;  // handed over locally
      lists[static_cast<size_t>(r)].push_back(
          {Key{t.end, 0, r, i, 0}, Action{send, a.mb, a.chunk, peer}});
      lists[static_cast<size_t>(peer)].push_back(
          {Key{t.end, 0, r, i, 1}, Action{recv, a.mb, plan.chunk_of_stage(to_stage), r}});
    }
  }
  plan.actions.assign(static_cast<size_t>(p), {});
  for (int r = 0; r < p; ++r) {
    auto& l = lists[static_cast<size_t>(r)];
    std::sort(l.begin(), l.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [key, a] : l) plan.actions[static_cast<size_t>(r)].push_back(a);
  }
}

void check_shape(Schedule schedule, int p, int m, int v) {
  const std::string_view name = schedule_name(schedule);
  COHORT_CHECK(p >= 1, "pipeline schedule {}: needs at least 1 rank, got {}", name, p);
  COHORT_CHECK(m >= 1, "pipeline schedule {}: needs at least 1 micro-batch, got {}", name, m);
  COHORT_CHECK(v >= 1, "pipeline schedule {}: needs at least 1 virtual stage per rank, got {}",
               name, v);
  COHORT_CHECK(schedule == Schedule::kInterleaved || v == 1,
               "pipeline schedule {}: runs one stage per rank (virtual stages {}): only "
               "interleaved runs several",
               name, v);
  COHORT_CHECK(schedule != Schedule::kInterleaved || m % p == 0,
               "pipeline schedule interleaved: micro-batches ({}) must be a multiple of the "
               "pipeline ranks ({}), since micro-batches go round the ranks in groups of {}; use "
               "{} or {} micro-batches",
               m, p, p, std::max(p, m / p * p), (m / p + 1) * p);
}

}  // namespace

Schedule parse_schedule(std::string_view name) {
  for (const auto& s : kSchedules)
    if (s.name == name) return s.schedule;
  throw InvalidArgument(
      fmt::format("pipeline: unknown schedule '{}': use gpipe, 1f1b, interleaved or zb-h1", name));
}

std::string_view schedule_name(Schedule schedule) {
  for (const auto& s : kSchedules)
    if (s.schedule == schedule) return s.name;
  return "?";
}

std::string_view kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "BW";
    case ActionKind::kBackwardInput:
      return "B";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kSendForward:
      return "SEND_F";
    case ActionKind::kRecvForward:
      return "RECV_F";
    case ActionKind::kSendBackward:
      return "SEND_B";
    case ActionKind::kRecvBackward:
      return "RECV_B";
  }
  return "?";
}

std::string to_string(const Action& a) {
  if (!a.is_comm()) return fmt::format("{}(mb {}, chunk {})", kind_name(a.kind), a.mb, a.chunk);
  const bool send = a.kind == ActionKind::kSendForward || a.kind == ActionKind::kSendBackward;
  return fmt::format("{}(mb {}, chunk {}, {} rank {})", kind_name(a.kind), a.mb, a.chunk,
                     send ? "to" : "from", a.peer);
}

std::string SchedulePlan::describe() const {
  return fmt::format("{}{} (p {}, v {}, m {})", schedule_name(schedule),
                     forward_only ? " forward" : "", ranks, chunks, micro_batches);
}

int default_chunks(Schedule schedule) { return schedule == Schedule::kInterleaved ? 2 : 1; }

SchedulePlan make_schedule(Schedule schedule, int ranks, int micro_batches, int chunks) {
  if (chunks == 0) chunks = default_chunks(schedule);
  check_shape(schedule, ranks, micro_batches, chunks);
  SchedulePlan plan{schedule, ranks, chunks, micro_batches, false, {}};
  std::vector<Order> orders;
  switch (schedule) {
    case Schedule::kGPipe:
      orders = gpipe_orders(ranks, micro_batches);
      break;
    case Schedule::k1F1B:
      orders = one_f_one_b_orders(ranks, micro_batches, ActionKind::kBackward);
      break;
    case Schedule::kInterleaved:
      orders = interleaved_orders(ranks, micro_batches, chunks);
      break;
    case Schedule::kZeroBubbleH1:
      orders = one_f_one_b_orders(ranks, micro_batches, ActionKind::kBackwardInput);
      break;
  }
  place_transfers(plan, simulate_orders(plan, orders, schedule == Schedule::kZeroBubbleH1));
  return plan;
}

SchedulePlan make_forward_schedule(int ranks, int micro_batches, int chunks) {
  check_shape(Schedule::kGPipe, ranks, micro_batches, 1);
  COHORT_CHECK(chunks >= 1, "pipeline forward: needs at least 1 chunk per rank, got {}", chunks);
  SchedulePlan plan{Schedule::kGPipe, ranks, chunks, micro_batches, true, {}};
  place_transfers(plan, simulate_orders(plan, forward_orders(ranks, micro_batches, chunks), false));
  return plan;
}

int peak_in_flight(const std::vector<Action>& actions) {
  int now = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++now);
    if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) --now;
  }
  return peak;
}

double simulated_bubble_fraction(const SchedulePlan& plan, const ActionCosts& costs) {
  const int p = plan.ranks;
  // Per ordered pair (from, to): the times of the sends so far, in order.
  std::vector<std::vector<double>> sent(static_cast<size_t>(p * p));
  std::vector<size_t> received(static_cast<size_t>(p * p), 0);
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> t(static_cast<size_t>(p), 0.0), busy(static_cast<size_t>(p), 0.0);
  auto cost = [&](ActionKind k) {
    switch (k) {
      case ActionKind::kForward:
        return costs.forward;
      case ActionKind::kBackward:
        return costs.backward_input + costs.backward_weight;
      case ActionKind::kBackwardInput:
        return costs.backward_input;
      case ActionKind::kBackwardWeight:
        return costs.backward_weight;
      default:
        return 0.0;
    }
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = plan.actions[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      double& now = t[static_cast<size_t>(r)];
      for (; i < list.size(); ++i, progress = true) {
        const Action& a = list[i];
        if (a.kind == ActionKind::kSendForward || a.kind == ActionKind::kSendBackward) {
          sent[static_cast<size_t>(r * p + a.peer)].push_back(now);
        } else if (a.kind == ActionKind::kRecvForward || a.kind == ActionKind::kRecvBackward) {
          const size_t pair = static_cast<size_t>(a.peer * p + r);
          if (received[pair] >= sent[pair].size()) break;  // not sent yet
          now = std::max(now, sent[pair][received[pair]++]);
        } else {
          now += cost(a.kind);
          busy[static_cast<size_t>(r)] += cost(a.kind);
        }
      }
    }
  }
  double makespan = 0, total_busy = 0;
  for (int r = 0; r < p; ++r) {
    COHORT_CHECK(next[static_cast<size_t>(r)] == plan.actions[static_cast<size_t>(r)].size(),
                 "simulated_bubble_fraction: {}: rank {} never gets past action {}",
                 plan.describe(), r, next[static_cast<size_t>(r)]);
    makespan = std::max(makespan, t[static_cast<size_t>(r)]);
    total_busy += busy[static_cast<size_t>(r)];
  }
  return makespan > 0 ? 1.0 - total_busy / (p * makespan) : 0.0;
}

double theoretical_bubble_fraction(Schedule schedule, int ranks, int micro_batches, int chunks) {
  const double p = ranks, m = micro_batches, v = chunks;
  switch (schedule) {
    case Schedule::kGPipe:
    case Schedule::k1F1B:
      return (p - 1) / (m + p - 1);
    case Schedule::kInterleaved:
      return (p - 1) / (v * m + p - 1);
    case Schedule::kZeroBubbleH1:
      return (p - 1) / (3 * m + p - 1);
  }
  return 0;
}

}  // namespace cohort::parallel::pipeline
