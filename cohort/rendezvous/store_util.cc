#include "cohort/rendezvous/store_util.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>

#include "cohort/base/error.h"

namespace cohort::rendezvous::detail {

int64_t parse_counter(const std::string& key, const Bytes& value) {
  if (value.empty()) return 0;
  int64_t out = 0;
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  auto [ptr, ec] = std::from_chars(begin, end, out);
  if (ec != std::errc() || ptr != end) {
    throw InvalidArgument(fmt::format("store add: key '{}' holds '{}', which is not an integer",
                                      key, std::string(begin, end)));
  }
  return out;
}

Bytes format_counter(int64_t value) {
  std::string s = std::to_string(value);
  return Bytes(s.begin(), s.end());
}

std::string timeout_message(const std::string& op, Duration timeout,
                            const std::vector<std::string>& missing, const std::string& where) {
  return fmt::format("{}: timed out after {} ms waiting for keys [{}] ({})", op, timeout.count(),
                     fmt::join(missing, ", "), where);
}

}  // namespace cohort::rendezvous::detail
