// Errors: every failure in cohort is reported by throwing cohort::Error or one
// of its subclasses. Messages name the operation, the rank (when there is one)
// and both sides of a failed check. Background threads never throw; they hand
// an std::exception_ptr to whoever waits on them. See docs/errors.md.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace cohort {

// Base of all cohort errors.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad argument from the caller: shapes, dtypes, values, flags.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Failure talking to the OS or a file: open/read/write, corrupt files.
class IoError : public Error {
 public:
  using Error::Error;
};

// A peer process died or its connection broke.
class PeerLost : public IoError {
 public:
  using IoError::IoError;
};

// A blocking wait ran past its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A feature that this build or this backend does not provide.
class NotSupported : public Error {
 public:
  using Error::Error;
};

// Formats "<what>: <strerror(errno_value)>".
std::string errno_message(const std::string& what, int errno_value);

// Throws IoError with errno's text appended.
[[noreturn]] void throw_errno(const std::string& what, int errno_value);

// `error` again, of the same cohort class (PeerLost, TimeoutError, ...; other
// exceptions become Error), with `prefix` before its message and `suffix`
// after: how a layer adds its context to a failure from below.
std::exception_ptr with_message(std::exception_ptr error, const std::string& prefix,
                                const std::string& suffix = "");

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);
}  // namespace detail

}  // namespace cohort

// COHORT_CHECK(cond, fmt, args...): throws cohort::InvalidArgument naming the
// message when cond is false. Use it for caller errors; the message must say
// what was wrong and what would be right.
#define COHORT_CHECK(cond, ...)                                    \
  do {                                                             \
    if (!(cond)) [[unlikely]] {                                    \
      throw ::cohort::InvalidArgument(::fmt::format(__VA_ARGS__)); \
    }                                                              \
  } while (0)

// COHORT_ASSERT(cond): an internal invariant; failure is a cohort bug and is
// reported as cohort::Error with file and line.
#define COHORT_ASSERT(cond, ...)                                                                \
  do {                                                                                          \
    if (!(cond)) [[unlikely]] {                                                                 \
      ::cohort::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                           \
  } while (0)
