#include "tools/cohort/trace_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::cli {
namespace {

using Interval = std::pair<double, double>;  // [start, end) in us

// Sorted, disjoint union of intervals.
std::vector<Interval> merge(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

// a minus b, both sorted and disjoint.
std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  for (Interval cur : a) {
    for (const Interval& cut : b) {
      if (cut.second <= cur.first || cut.first >= cur.second) continue;
      if (cut.first > cur.first) out.emplace_back(cur.first, cut.first);
      cur.first = std::max(cur.first, cut.second);
      if (cur.first >= cur.second) break;
    }
    if (cur.first < cur.second) out.push_back(cur);
  }
  return out;
}

double overlap(const Interval& x, const std::vector<Interval>& set) {
  double sum = 0;
  for (const Interval& s : set)
    sum += std::max(0.0, std::min(x.second, s.second) - std::max(x.first, s.first));
  return sum;
}

}  // namespace

std::map<int, RankTraceStats> trace_stats(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(fmt::format("cohort trace-stats: cannot read {}", path));
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    throw InvalidArgument(fmt::format(
        "cohort trace-stats: {} is not a Chrome trace (a JSON object with \"traceEvents\"; write "
        "one with `cohort train --trace {}`)",
        path, path));
  }
  struct Spans {
    std::vector<Interval> backward, waits;
    std::vector<Interval> comm;
  };
  std::map<int, Spans> spans;
  std::map<int, RankTraceStats> stats;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const int pid = e.value("pid", 0);
    const std::string name = e.value("name", "");
    const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
    RankTraceStats& st = stats[pid];
    if (e.value("cat", "") == "comm" && name.rfind("wait", 0) != 0) {
      st.phase_ms["all_reduce"] += dur / 1000;
      st.comm_ms += dur / 1000;
      spans[pid].comm.emplace_back(ts, ts + dur);
      continue;
    }
    st.phase_ms[name] += dur / 1000;
    if (name == "step") ++st.steps;
    if (name == "backward") spans[pid].backward.emplace_back(ts, ts + dur);
    if (name == "wait for gradient reduction") spans[pid].waits.emplace_back(ts, ts + dur);
  }
  for (auto& [pid, s] : spans) {
    const std::vector<Interval> compute = subtract(merge(s.backward), merge(s.waits));
    double sum = 0;
    for (const Interval& c : s.comm) sum += overlap(c, compute);
    stats[pid].comm_overlapping_backward_ms = sum / 1000;
  }
  return stats;
}

}  // namespace cohort::cli
