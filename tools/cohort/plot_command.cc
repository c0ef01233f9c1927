// `cohort plot metrics.jsonl -o curves.svg`: the loss and accuracy curves of
// a training run (per step and per epoch) as an SVG (tools/cohort/metrics_chart.h).
// The file is written next to its destination and renamed into place, so a
// viewer never opens half a picture.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "cohort/base/error.h"
#include "tools/cohort/command.h"
#include "tools/cohort/metrics_chart.h"

namespace cohort::cli {
namespace {

struct PlotArgs {
  std::string metrics;
  std::string output = "curves.svg";
  std::string title;
};

int run_plot(const PlotArgs& a) {
  MetricsSeries series = read_metrics(a.metrics);
  const std::string title =
      a.title.empty() ? std::filesystem::path(a.metrics).filename().string() : a.title;
  const std::string svg = render_chart(series, title);
  const std::string tmp = a.output + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << svg;
    out.flush();
    if (!out) throw_errno(fmt::format("cohort plot: cannot write {}", tmp), errno);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, a.output, ec);
  if (ec) {
    throw IoError(
        fmt::format("cohort plot: cannot rename {} to {}: {}", tmp, a.output, ec.message()));
  }
  std::printf("cohort plot: %s: %zu steps, %zu epochs -> %s\n", a.metrics.c_str(),
              series.steps.size(), series.epochs.size(), a.output.c_str());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<PlotArgs>();
  app.add_option("metrics", args->metrics, "Metrics file written by `cohort train --metrics`")
      ->required();
  app.add_option("-o,--output", args->output, "SVG file to write")->capture_default_str();
  app.add_option("--title", args->title, "Title above the curves (default: the file's name)");
  return [args] { return run_plot(*args); };
}

CommandRegistrar reg({"plot",
                      "Draw the loss and accuracy curves of a `cohort train --metrics` file "
                      "as an SVG",
                      setup});

}  // namespace
}  // namespace cohort::cli
