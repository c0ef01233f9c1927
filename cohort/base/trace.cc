#include "cohort/base/trace.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>

#include "cohort/base/error.h"

namespace cohort {
namespace {

// JSON string contents: names come from code, but a path or a user's module
// name may hold quotes or backslashes.
std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Tracer::Tracer(int process_id, std::string process_name)
    : pid_(process_id), process_name_(std::move(process_name)), steady_base_(Clock::now()) {
  wall_base_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
}

int64_t Tracer::wall_us(Clock::time_point t) const {
  return wall_base_us_ +
         std::chrono::duration_cast<std::chrono::microseconds>(t - steady_base_).count();
}

void Tracer::span(std::string_view track, std::string_view name, std::string_view category,
                  Clock::time_point start, Clock::time_point end, std::string_view args_json) {
  const int64_t ts = wall_us(start);
  const int64_t dur = std::max<int64_t>(0, wall_us(end) - ts);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tracks_.find(track);
  if (it == tracks_.end()) {
    it = tracks_.emplace(std::string(track), static_cast<int>(tracks_.size())).first;
  }
  if (!events_.empty()) events_ += ",\n";
  events_ += fmt::format(
      R"({{"name":"{}","cat":"{}","ph":"X","ts":{},"dur":{},"pid":{},"tid":{},"args":{{{}}}}})",
      escape(name), escape(category), ts, dur, pid_, it->second, args_json);
  ++spans_;
}

std::string Tracer::events_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = fmt::format(
      R"({{"name":"process_name","ph":"M","pid":{0},"tid":0,"args":{{"name":"{1}"}}}},)"
      R"({{"name":"process_sort_index","ph":"M","pid":{0},"tid":0,"args":{{"sort_index":{0}}}}})",
      pid_, escape(process_name_));
  for (const auto& [name, tid] : tracks_) {
    out += fmt::format(
        R"(,
{{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})",
        pid_, tid, escape(name));
  }
  if (!events_.empty()) out += ",\n" + events_;
  return out;
}

std::string Tracer::document(const std::vector<std::string>& event_lists) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  for (const std::string& list : event_lists) {
    if (list.empty()) continue;
    if (!first) out += ",\n";
    out += list;
    first = false;
  }
  return out + "\n]}\n";
}

void Tracer::write(const std::string& path) const { write_document(path, {events_json()}); }

void Tracer::write_document(const std::string& path, const std::vector<std::string>& event_lists) {
  const std::string doc = document(event_lists);
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw_errno(fmt::format("trace {}: cannot open {}", path, tmp), errno);
  const bool ok = std::fwrite(doc.data(), 1, doc.size(), f) == doc.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) throw_errno(fmt::format("trace {}: write failed", path), err);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw_errno(fmt::format("trace {}: cannot rename {} into place", path, tmp), errno);
}

size_t Tracer::spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_;
}

}  // namespace cohort
