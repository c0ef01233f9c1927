#include "cohort/rendezvous/slurm.h"

#include <fmt/format.h>

#include <cctype>

#include "cohort/base/error.h"

namespace cohort::rendezvous::slurm {
namespace {

// One item of a bracket group: "07" or "1-12"; width is the digits of lo,
// which Slurm keeps as zero padding.
struct Range {
  uint64_t lo = 0;
  uint64_t hi = 0;
  size_t width = 0;
};

// A piece of one host-list entry: literal text, or a bracket group.
struct Part {
  std::string text;
  std::vector<Range> group;  // empty: literal
};
using Entry = std::vector<Part>;

[[noreturn]] void fail(std::string_view list, size_t pos, std::string_view what) {
  throw InvalidArgument(
      fmt::format("Slurm host list '{}': {} at position {} (expected names like "
                  "'node[01-04,07],gpu3')",
                  list, what, pos));
}

bool digit(char c) { return c >= '0' && c <= '9'; }

// Digits from pos; at most 18 so that the value fits.
uint64_t number(std::string_view list, size_t& pos, size_t end, size_t* width) {
  size_t start = pos;
  uint64_t v = 0;
  while (pos < end && digit(list[pos])) {
    if (pos - start == 18) fail(list, start, "a number of more than 18 digits");
    v = v * 10 + static_cast<uint64_t>(list[pos] - '0');
    ++pos;
  }
  if (pos == start) {
    fail(list, pos,
         pos < end ? fmt::format("'{}' where a number belongs", list[pos])
                   : std::string("a missing number"));
  }
  if (width) *width = pos - start;
  return v;
}

// The items between '[' and ']' (begin..end, exclusive).
std::vector<Range> parse_group(std::string_view list, size_t begin, size_t end) {
  if (begin == end) fail(list, begin - 1, "an empty '[]'");
  std::vector<Range> group;
  size_t pos = begin;
  while (true) {
    Range r;
    r.lo = number(list, pos, end, &r.width);
    r.hi = r.lo;
    if (pos < end && list[pos] == '-') {
      ++pos;
      size_t hi_pos = pos;
      r.hi = number(list, pos, end, nullptr);
      if (r.hi < r.lo)
        fail(list, hi_pos, fmt::format("a range {}-{} that runs backwards", r.lo, r.hi));
    }
    group.push_back(r);
    if (pos == end) return group;
    if (list[pos] != ',') fail(list, pos, fmt::format("'{}' inside '[...]'", list[pos]));
    ++pos;
  }
}

std::vector<Entry> parse(std::string_view list) {
  if (list.empty())
    throw InvalidArgument("Slurm host list is empty (expected names like 'node[01-04,07],gpu3')");
  std::vector<Entry> entries;
  Entry entry;
  std::string text;
  auto flush_text = [&] {
    if (!text.empty()) entry.push_back(Part{std::move(text), {}});
    text.clear();
  };
  auto end_entry = [&](size_t pos) {
    flush_text();
    if (entry.empty()) fail(list, pos, "an empty host name");
    entries.push_back(std::move(entry));
    entry.clear();
  };
  size_t i = 0;
  while (i < list.size()) {
    const char c = list[i];
    if (c == ',') {
      end_entry(i);
      ++i;
    } else if (c == '[') {
      flush_text();
      size_t close = list.find_first_of("[]", i + 1);
      if (close == std::string_view::npos || list[close] == '[') fail(list, i, "an unclosed '['");
      entry.push_back(Part{"", parse_group(list, i + 1, close)});
      i = close + 1;
    } else if (c == ']') {
      fail(list, i, "a ']' without '['");
    } else if (std::isspace(static_cast<unsigned char>(c)) ||
               std::iscntrl(static_cast<unsigned char>(c))) {
      fail(list, i, "a space or control character");
    } else {
      text += c;
      ++i;
    }
  }
  end_entry(list.size());
  return entries;
}

std::string format_number(uint64_t v, size_t width) { return fmt::format("{:0{}}", v, width); }

// Hosts a bracket group names, saturating (each range holds at most 10^18).
uint64_t group_size(const std::vector<Range>& group) {
  uint64_t n = 0;
  for (const Range& r : group) {
    const uint64_t k = r.hi - r.lo + 1;
    n = n > UINT64_MAX - k ? UINT64_MAX : n + k;
  }
  return n;
}

}  // namespace

std::string first_host(std::string_view hostlist) {
  std::vector<Entry> entries = parse(hostlist);
  std::string host;
  for (const Part& p : entries.front()) {
    host += p.group.empty() ? p.text : format_number(p.group.front().lo, p.group.front().width);
  }
  return host;
}

std::vector<std::string> expand_hostlist(std::string_view hostlist, size_t max_hosts) {
  std::vector<std::string> hosts;
  for (const Entry& entry : parse(hostlist)) {
    uint64_t count = 1;
    for (const Part& p : entry) {
      if (p.group.empty()) continue;
      uint64_t n = group_size(p.group);
      if (n > max_hosts || count > max_hosts / n)
        count = max_hosts + 1;
      else
        count *= n;
    }
    if (count > max_hosts - hosts.size()) {
      throw InvalidArgument(
          fmt::format("Slurm host list '{}' names more than {} hosts", hostlist, max_hosts));
    }
    std::vector<std::string> partial = {""};
    for (const Part& p : entry) {
      std::vector<std::string> next;
      if (p.group.empty()) {
        for (std::string& s : partial) next.push_back(s + p.text);
      } else {
        for (const std::string& s : partial) {
          for (const Range& r : p.group) {
            for (uint64_t v = r.lo; v <= r.hi; ++v) next.push_back(s + format_number(v, r.width));
          }
        }
      }
      partial = std::move(next);
    }
    hosts.insert(hosts.end(), partial.begin(), partial.end());
  }
  return hosts;
}

int tasks_on_node(std::string_view tasks_per_node, int node_id) {
  auto bad = [&](size_t pos, std::string_view what) {
    return InvalidArgument(fmt::format(
        "Slurm tasks-per-node list '{}': {} at position {} (expected counts like '2(x3),1')",
        tasks_per_node, what, pos));
  };
  COHORT_CHECK(node_id >= 0, "Slurm tasks-per-node: node index {} is negative", node_id);
  int64_t node = 0;
  int64_t found = -1;
  size_t pos = 0;
  while (true) {
    size_t start = pos;
    if (pos >= tasks_per_node.size() || !digit(tasks_per_node[pos]))
      throw bad(pos, "a missing count");
    int64_t tasks = 0;
    while (pos < tasks_per_node.size() && digit(tasks_per_node[pos])) {
      if (pos - start == 9) throw bad(start, "a count of more than 9 digits");
      tasks = tasks * 10 + (tasks_per_node[pos++] - '0');
    }
    int64_t repeat = 1;
    if (tasks_per_node.substr(pos, 2) == "(x") {
      pos += 2;
      size_t rstart = pos;
      repeat = 0;
      while (pos < tasks_per_node.size() && digit(tasks_per_node[pos])) {
        if (pos - rstart == 9) throw bad(rstart, "a repeat of more than 9 digits");
        repeat = repeat * 10 + (tasks_per_node[pos++] - '0');
      }
      if (pos == rstart || repeat == 0) throw bad(rstart, "a missing or zero repeat");
      if (pos >= tasks_per_node.size() || tasks_per_node[pos] != ')')
        throw bad(pos, "a missing ')'");
      ++pos;
    }
    if (found < 0 && node_id < node + repeat) found = tasks;  // the rest is checked too
    node += repeat;
    if (pos == tasks_per_node.size()) break;
    if (tasks_per_node[pos] != ',') throw bad(pos, fmt::format("'{}'", tasks_per_node[pos]));
    ++pos;
  }
  if (found >= 0) return static_cast<int>(found);
  throw InvalidArgument(
      fmt::format("Slurm tasks-per-node list '{}' describes {} nodes; there is no node {}",
                  tasks_per_node, node, node_id));
}

uint16_t port_for_job(int64_t job_id) {
  COHORT_CHECK(job_id >= 0, "Slurm job id {} is negative", job_id);
  return static_cast<uint16_t>(10000 + job_id % 50000);
}

}  // namespace cohort::rendezvous::slurm
