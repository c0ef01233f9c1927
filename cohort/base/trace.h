// Tracer: timed spans of one process for a Chrome / Perfetto trace (the JSON
// "Trace Event Format" that chrome://tracing and ui.perfetto.dev open), so a
// user sees what each rank did when: data loading, forward, backward, each
// gradient bucket's all_reduce, the optimizer step, checkpoints.
//
// A process is one trace "pid" (its rank); spans go on named tracks ("main",
// "comm", ...), one row each in the viewer. Times are the steady clock,
// written as microseconds of wall-clock time, so the traces of processes on
// one host line up when merged (hosts line up as well as their clocks do).
//
// Passed explicitly (an options field, a setter) to what records into it;
// nothing records when no Tracer is given. Thread safety: span() may be
// called from any thread (a short lock per span; spans are per step or per
// bucket, not per element). events_json() and write() take the same lock.
// Errors: write() throws IoError naming the path.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;

  // process_id: the trace pid (the rank); process_name: its label ("rank 0").
  Tracer(int process_id, std::string process_name);

  // Records [start, end) on `track`. args_json: "" or a JSON object's members
  // without braces, e.g. "\"bytes\": 4096".
  void span(std::string_view track, std::string_view name, std::string_view category,
            Clock::time_point start, Clock::time_point end, std::string_view args_json = {});

  // This process's events (metadata first) as comma-separated JSON objects,
  // ready to be joined with other processes' into one document.
  std::string events_json() const;
  // The Trace Event Format document around event lists of one or more processes.
  static std::string document(const std::vector<std::string>& event_lists);
  // Writes document({events_json()}) to path (atomically: temp file + rename).
  void write(const std::string& path) const;
  // Writes document(event_lists) to path, atomically.
  static void write_document(const std::string& path, const std::vector<std::string>& event_lists);

  size_t spans() const;
  int process_id() const { return pid_; }

 private:
  int64_t wall_us(Clock::time_point t) const;

  int pid_;
  std::string process_name_;
  Clock::time_point steady_base_;
  int64_t wall_base_us_;
  mutable std::mutex mu_;
  std::map<std::string, int, std::less<>> tracks_;  // name -> tid
  std::string events_;                              // span events, comma-separated
  size_t spans_ = 0;
};

// RAII span on the calling thread's chosen track; a no-op when tracer is null.
class TraceSpan {
 public:
  TraceSpan(Tracer* tracer, std::string_view track, std::string_view name,
            std::string_view category)
      : tracer_(tracer), track_(track), name_(name), category_(category) {
    if (tracer_ != nullptr) start_ = Tracer::Clock::now();
  }
  ~TraceSpan() {
    if (tracer_ != nullptr) tracer_->span(track_, name_, category_, start_, Tracer::Clock::now());
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Tracer* tracer_;
  std::string_view track_, name_, category_;  // literals in practice
  Tracer::Clock::time_point start_;
};

}  // namespace cohort
