// MetricsWriter: appends one JSON object per line to a metrics file (JSON
// Lines), e.g. `cohort train --metrics FILE`'s records: one per step and one
// per epoch, told apart by "type" (`cohort plot` draws them):
//   {"type": "step", "epoch": 1, "step": 12, "loss": 0.93, "seconds": 0.4}
//   {"type": "epoch", "epoch": 1, "step": 938, "train_loss": 0.61,
//    "test_loss": 0.55, "test_accuracy": 0.79, "seconds": 9.8,
//    "samples_per_second": 6122.4, "complete": true}
// Each append opens, writes one line and closes the file, so a reader (or a
// resumed run) sees whole lines. Non-finite numbers are written as null.
// Errors: IoError naming the path. Thread safety: one writer per file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cohort::train {

class MetricsWriter {
 public:
  explicit MetricsWriter(std::string path) : path_(std::move(path)) {}
  // Checks that the file can be opened for appending (creating it).
  void check_writable() const;
  void append(const nlohmann::json& record) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// value, or null when it is NaN or infinite.
nlohmann::json json_number(double value);

}  // namespace cohort::train
