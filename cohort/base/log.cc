#include "cohort/base/log.h"

#include <unistd.h>

#include <atomic>
#include <string>

namespace cohort {
namespace {

constexpr const char* kNames[] = {"error", "warning", "info", "debug"};

std::atomic<int>& level_slot() {
  static std::atomic<int> level{static_cast<int>(LogLevel::kWarn)};
  return level;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_slot().load(std::memory_order_relaxed)); }

void set_log_level(LogLevel level) { level_slot().store(static_cast<int>(level)); }

void log_line(LogLevel level, std::string_view text) {
  std::string line = fmt::format("cohort {}: {}\n", kNames[static_cast<int>(level)], text);
  // One write(2) per line keeps lines from different threads whole.
  [[maybe_unused]] auto n = ::write(2, line.data(), line.size());
}

}  // namespace cohort
