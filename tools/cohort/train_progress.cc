#include "tools/cohort/train_progress.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

namespace cohort::cli {
namespace {

std::string clock_str(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string number(double v, int digits) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : std::string("n/a");
}

}  // namespace

ProgressPrinter::ProgressPrinter(std::FILE* out, bool terminal, const train::TrainOptions& options)
    : out_(out), terminal_(terminal), options_(options) {}

ProgressPrinter::~ProgressPrinter() { break_line(); }

void ProgressPrinter::break_line() {
  if (line_open_) {
    std::fputc('\n', out_);
    line_open_ = false;
  }
}

void ProgressPrinter::on_start(const train::RunInfo& info) {
  std::string how;
  switch (info.strategy) {
    case train::Strategy::kDdp:
      how = fmt::format("DDP, {} ranks x {} threads", info.world_size, info.threads);
      break;
    case train::Strategy::kDp:
      how = fmt::format("DataParallel, {} replicas x {} threads", info.replicas, info.threads);
      break;
    case train::Strategy::kPipeline:
    case train::Strategy::kTensor:
    case train::Strategy::kPs:
    case train::Strategy::kZero:
      how = fmt::format("{}, {} ranks x {} threads", info.layout, info.world_size, info.threads);
      break;
    default:
      how = fmt::format("1 process, {} threads", info.threads);
  }
  if (options_.precision == ComputePrecision::kBFloat16)
    how += fmt::format(", bf16 compute ({})",
                       native::bf16_path_name(options_.precision_policy().bf16_path));
  if (options_.grad_reduce == ComputePrecision::kBFloat16) how += ", bf16 gradient reduction";
  if (options_.sync_batchnorm && info.strategy == train::Strategy::kDdp) how += ", SyncBatchNorm";
  if (options_.fault_tolerant) how += ", fault-tolerant (survivors go on, replacements rejoin)";
  if (options_.comm_hook) {
    how += fmt::format(", comm hook {}", train::comm_hook_name(*options_.comm_hook));
    if (train::is_powersgd(*options_.comm_hook))
      how += fmt::format(" from step {}", options_.comm_hook->start_iter);
  }
  if (options_.bf16_weights)
    how += fmt::format(", bf16 weights ({} rounding)",
                       optim::weight_rounding_name(*options_.bf16_weights));
  tokens_per_example_ = info.tokens_per_example;
  if (tokens_per_example_ > 0) {
    std::fprintf(
        out_,
        "cohort train: %s on %s, %s; %lld train tokens, %lld validation windows, batch "
        "%lld x %lld tokens (%lld tokens per step), %lld steps per epoch\n",
        std::string(train::model_name(options_.model)).c_str(), info.data_description.c_str(),
        how.c_str(), static_cast<long long>(info.train_examples),
        static_cast<long long>(info.test_examples), static_cast<long long>(options_.batch_size),
        static_cast<long long>(tokens_per_example_),
        static_cast<long long>(info.global_batch_size * tokens_per_example_),
        static_cast<long long>(info.steps_per_epoch));
  } else {
    std::fprintf(
        out_,
        "cohort train: %s on %s, %s; %lld train / %lld test examples, batch %lld (%lld per "
        "step), %lld steps per epoch\n",
        std::string(train::model_name(options_.model)).c_str(),
        std::string(train::dataset_name(options_.dataset)).c_str(), how.c_str(),
        static_cast<long long>(info.train_examples), static_cast<long long>(info.test_examples),
        static_cast<long long>(options_.batch_size), static_cast<long long>(info.global_batch_size),
        static_cast<long long>(info.steps_per_epoch));
  }
  if (!info.backend.empty()) {
    // Which backend carries the job and why (`--backend auto` decides from the
    // device and the GPUs per host), and where this rank trains.
    std::fprintf(out_, "cohort train: backend %s (%s), rank %d on %s\n", info.backend.c_str(),
                 info.backend_reason.c_str(), info.rank, info.device.str().c_str());
  }
  if (!info.resumed_from.empty()) {
    std::fprintf(out_, "resumed from %s at step %lld (epoch %lld)\n", info.resumed_from.c_str(),
                 static_cast<long long>(info.start_step),
                 static_cast<long long>(info.start_epoch + 1));
  }
  std::fflush(out_);
}

void ProgressPrinter::on_step(const train::StepInfo& s) {
  const bool lm = tokens_per_example_ > 0;
  std::string text =
      fmt::format("epoch {}/{} step {}/{} loss {} {:.0f} {}/s ETA {}", s.epoch + 1, options_.epochs,
                  s.step_in_epoch, s.steps_in_epoch, number(s.loss, 4),
                  s.samples_per_second * static_cast<double>(lm ? tokens_per_example_ : 1),
                  lm ? "tokens" : "samples", clock_str(s.eta_seconds));
  if (terminal_) {
    auto now = std::chrono::steady_clock::now();
    if (!s.last && line_open_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    int filled = s.steps_in_epoch > 0
                     ? static_cast<int>(kWidth * s.step_in_epoch / s.steps_in_epoch)
                     : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r[%s] %s\x1b[K", bar.c_str(), text.c_str());
    line_open_ = true;
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

void ProgressPrinter::on_epoch_end(const train::EpochStats& e) {
  break_line();
  const bool lm = tokens_per_example_ > 0;
  std::string acc = lm ? fmt::format("val loss {} (perplexity {})", number(e.test_loss, 4),
                                     number(std::exp(e.test_loss), 2))
                    : std::isfinite(e.test_accuracy)
                        ? fmt::format("test accuracy {:.4f}", e.test_accuracy)
                        : fmt::format("test loss {}", number(e.test_loss, 4));
  std::fprintf(out_, "epoch %lld%s: train loss %s, %s, %.1f s, %.0f %s/s\n",
               static_cast<long long>(e.epoch), e.complete ? "" : " (stopped at --max-steps)",
               number(e.train_loss, 4).c_str(), acc.c_str(), e.seconds,
               e.samples_per_second * static_cast<double>(lm ? tokens_per_example_ : 1),
               lm ? "tokens" : "samples");
  std::fflush(out_);
}

void ProgressPrinter::on_checkpoint(const std::string& path, int64_t step) {
  if (terminal_) return;  // keep the bar clean; the summary follows
  std::fprintf(out_, "checkpoint: %s (step %lld)\n", path.c_str(), static_cast<long long>(step));
  std::fflush(out_);
}

}  // namespace cohort::cli
