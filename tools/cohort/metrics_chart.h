// The picture of a training run that `cohort plot` draws: a metrics file
// (`cohort train --metrics`, JSON Lines with "step" and "epoch" records, see
// cohort/train/metrics_writer.h) read into series, and rendered as one SVG
// with two panels sharing the step axis:
//   top:    loss — every step's training loss (thin blue), each epoch's mean
//           training loss (orange) and test loss (green), dots at epoch ends;
//   bottom: test accuracy per epoch (red), from 0 to 1.
// The layout and colours are constants here so a test can look for the axes
// and the curves in the rendered pixels, as a person would.
//
// A resumed run appends to the same file and repeats the steps after its
// checkpoint: for a step or epoch seen twice the later record wins, which is
// what the resumed run computed.
//
// Errors: IoError for an unreadable file; InvalidArgument naming the file and
// line for a line that is not a JSON object, and for a file without any step
// or epoch record (nothing to draw).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::cli {

struct StepPoint {
  int64_t step = 0;
  double loss = 0;
};

struct EpochPoint {
  int64_t epoch = 0;
  int64_t step = 0;          // the step the epoch ended at
  double train_loss = 0;     // NaN when absent
  double test_loss = 0;      // NaN when absent
  double test_accuracy = 0;  // NaN when absent (models without classes)
};

struct MetricsSeries {
  std::vector<StepPoint> steps;    // sorted by step, one per step
  std::vector<EpochPoint> epochs;  // sorted by epoch, one per epoch
};

MetricsSeries read_metrics(const std::string& path);

namespace chart {
inline constexpr int kWidth = 800;
inline constexpr int kHeight = 600;
inline constexpr int kLeft = 70;    // x of both panels' y axes
inline constexpr int kRight = 770;  // end of the x axes
// Panel y extents (top, bottom = where the x axis is drawn).
inline constexpr int kLossTop = 50;
inline constexpr int kLossBottom = 300;
inline constexpr int kAccTop = 360;
inline constexpr int kAccBottom = 550;
inline constexpr const char* kAxisColor = "#000000";
inline constexpr const char* kStepLossColor = "#1f77b4";
inline constexpr const char* kTrainLossColor = "#ff7f0e";
inline constexpr const char* kTestLossColor = "#2ca02c";
inline constexpr const char* kAccuracyColor = "#d62728";
}  // namespace chart

// The SVG document (kWidth x kHeight). title: drawn above the panels.
std::string render_chart(const MetricsSeries& series, const std::string& title);

}  // namespace cohort::cli
