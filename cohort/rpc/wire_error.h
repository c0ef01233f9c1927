// How an RPC handler's exception travels back to its caller: the error frame
// carries a class, so the caller rethrows the kind the handler threw
// (InvalidArgument, TimeoutError, ...) with the handler's text.
// Internal to the rpc layer. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <utility>

namespace cohort::rpc::detail {

// Error classes on the wire, so the caller rethrows the handler's kind.
enum ErrorClass : uint8_t {
  kErrGeneric = 0,
  kErrInvalid = 1,
  kErrTimeout = 2,
  kErrPeerLost = 3,
  kErrIo = 4,
  kErrNotSupported = 5,
};

// The class and text of e, for an error frame.
std::pair<uint8_t, std::string> classify(std::exception_ptr e);

// The exception an error frame of class cls stands for.
std::exception_ptr make_error(uint8_t cls, const std::string& text);

}  // namespace cohort::rpc::detail
