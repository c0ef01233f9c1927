#include "cohort/base/error.h"

#include <cstring>

namespace cohort {

std::string errno_message(const std::string& what, int errno_value) {
  return fmt::format("{}: {}", what, std::strerror(errno_value));
}

void throw_errno(const std::string& what, int errno_value) {
  throw IoError(errno_message(what, errno_value));
}

namespace detail {
void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(fmt::format("internal error at {}:{}: {} {}", file, line, cond, msg));
}
}  // namespace detail

}  // namespace cohort
