#include "cohort/base/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace cohort {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("COHORT_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kWarn;
  std::string_view v(env);
  if (v == "error") return LogLevel::kError;
  if (v == "info") return LogLevel::kInfo;
  if (v == "debug") return LogLevel::kDebug;
  return LogLevel::kWarn;
}

std::atomic<int>& level_slot() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_slot().load(std::memory_order_relaxed)); }

void set_log_level(LogLevel level) { level_slot().store(static_cast<int>(level)); }

void log_line(LogLevel level, std::string_view text) {
  static constexpr const char* kNames[] = {"error", "warning", "info", "debug"};
  std::string line = fmt::format("cohort {}: {}\n", kNames[static_cast<int>(level)], text);
  // One write(2) per line keeps lines from different threads whole.
  [[maybe_unused]] auto n = ::write(2, line.data(), line.size());
}

}  // namespace cohort
