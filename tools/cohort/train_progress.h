// ProgressPrinter: how `cohort train` reports a run on stdout. On a terminal
// it redraws one progress line in place (epoch, step, loss, samples/s, ETA)
// at most ten times a second; otherwise (a pipe, a file, `cohort run`'s
// prefixed output) it prints one plain line per reported step. Either way
// each epoch ends with one summary line. Called on the training thread only.
#pragma once

#include <chrono>
#include <cstdio>

#include "cohort/train/trainer.h"

namespace cohort::cli {

class ProgressPrinter : public train::TrainObserver {
 public:
  ProgressPrinter(std::FILE* out, bool terminal, const train::TrainOptions& options);
  ~ProgressPrinter() override;

  void on_start(const train::RunInfo& info) override;
  void on_step(const train::StepInfo& step) override;
  void on_epoch_end(const train::EpochStats& stats) override;
  void on_checkpoint(const std::string& path, int64_t step) override;

 private:
  // Ends the in-place line before a normal line is printed.
  void break_line();

  std::FILE* out_;
  bool terminal_;
  const train::TrainOptions& options_;
  bool line_open_ = false;
  int64_t tokens_per_example_ = 0;  // a language model's block size (progress in tokens)
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace cohort::cli
