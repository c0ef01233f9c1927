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

std::exception_ptr with_message(std::exception_ptr error, const std::string& prefix,
                                const std::string& suffix) {
  try {
    std::rethrow_exception(error);
  } catch (const PeerLost& e) {
    return std::make_exception_ptr(PeerLost(prefix + e.what() + suffix));
  } catch (const IoError& e) {
    return std::make_exception_ptr(IoError(prefix + e.what() + suffix));
  } catch (const TimeoutError& e) {
    return std::make_exception_ptr(TimeoutError(prefix + e.what() + suffix));
  } catch (const NotSupported& e) {
    return std::make_exception_ptr(NotSupported(prefix + e.what() + suffix));
  } catch (const InvalidArgument& e) {
    return std::make_exception_ptr(InvalidArgument(prefix + e.what() + suffix));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(Error(prefix + e.what() + suffix));
  } catch (...) {
    return std::make_exception_ptr(Error(prefix + "unknown exception" + suffix));
  }
}

}  // namespace cohort
