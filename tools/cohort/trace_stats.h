// What a run's trace (`cohort train --trace`) says, per rank: time in each
// phase (data, forward, backward, optimizer, checkpoint, evaluate), time the
// gradient all_reduces ran, and how much of that ran while backward was
// still computing gradients — the overlap DDP's bucketing exists for.
// Backward computes until the last bucket is launched; the rest of its span
// is the "wait for gradient reduction" (cohort/parallel/reducer.h), so
// communication that only ran during that wait counts as exposed, not
// overlapped. Spans are wall-clock: with one core per worker the all_reduce
// thread and backward take turns on it, and overlap is what ran in between.
//
// Errors: IoError for an unreadable file, InvalidArgument for a file that is
// not a Chrome trace.
#pragma once

#include <map>
#include <string>

namespace cohort::cli {

struct RankTraceStats {
  std::map<std::string, double>
      phase_ms;        // summed span time by name (buckets summed as "all_reduce")
  double comm_ms = 0;  // all_reduce spans on the comm track
  double comm_overlapping_backward_ms = 0;
  int steps = 0;
  double overlap_fraction() const {
    return comm_ms > 0 ? comm_overlapping_backward_ms / comm_ms : 0;
  }
};

// By rank (the trace pid).
std::map<int, RankTraceStats> trace_stats(const std::string& path);

}  // namespace cohort::cli
