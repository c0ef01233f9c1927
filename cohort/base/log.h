// Logging to stderr with a process-wide level (the one piece of global mutable
// state besides grad mode). Thread safe: each line is written with one call.
// The level starts at warn; the edge sets it (COHORT_LOG_LEVEL; docs/configuration.md).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace cohort {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_line(LogLevel level, std::string_view text);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level <= log_level()) log_line(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace cohort

#define COHORT_WARN(...) ::cohort::log(::cohort::LogLevel::kWarn, __VA_ARGS__)
#define COHORT_INFO(...) ::cohort::log(::cohort::LogLevel::kInfo, __VA_ARGS__)
#define COHORT_DEBUG(...) ::cohort::log(::cohort::LogLevel::kDebug, __VA_ARGS__)
