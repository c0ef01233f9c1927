// `cohort trace-stats trace.json`: per rank, where the time of a traced run
// went and what share of the gradient all_reduces overlapped backward
// (tools/cohort/trace_stats.h).
#include <cstdio>
#include <memory>
#include <string>

#include "tools/cohort/command.h"
#include "tools/cohort/trace_stats.h"

namespace cohort::cli {
namespace {

int run_trace_stats(const std::string& path) {
  const auto stats = trace_stats(path);
  for (const auto& [rank, s] : stats) {
    std::printf("rank %d: %d steps", rank, s.steps);
    for (const char* phase : {"data", "forward", "backward", "optimizer", "all_reduce",
                              "wait for gradient reduction", "checkpoint", "evaluate"}) {
      auto it = s.phase_ms.find(phase);
      if (it != s.phase_ms.end()) std::printf(", %s %.1f ms", phase, it->second);
    }
    std::printf("\n");
    if (s.comm_ms > 0) {
      std::printf(
          "rank %d: all_reduce %.1f ms, %.1f ms of it during backward's compute: overlap %.1f%%\n",
          rank, s.comm_ms, s.comm_overlapping_backward_ms, 100.0 * s.overlap_fraction());
    }
  }
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  app.add_option("trace", *path, "Trace written by `cohort train --trace`")->required();
  return [path] { return run_trace_stats(*path); };
}

CommandRegistrar reg({"trace-stats",
                      "Summarise a `cohort train --trace` file: time per phase and rank, and how "
                      "much of the gradient all_reduce overlapped backward",
                      setup});

}  // namespace
}  // namespace cohort::cli
