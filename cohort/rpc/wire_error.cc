#include "cohort/rpc/wire_error.h"

#include "cohort/base/error.h"

namespace cohort::rpc::detail {

std::pair<uint8_t, std::string> classify(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const InvalidArgument& x) {
    return {kErrInvalid, x.what()};
  } catch (const TimeoutError& x) {
    return {kErrTimeout, x.what()};
  } catch (const PeerLost& x) {
    return {kErrPeerLost, x.what()};
  } catch (const IoError& x) {
    return {kErrIo, x.what()};
  } catch (const NotSupported& x) {
    return {kErrNotSupported, x.what()};
  } catch (const std::exception& x) {
    return {kErrGeneric, x.what()};
  } catch (...) {
    return {kErrGeneric, "unknown exception (not derived from std::exception)"};
  }
}

std::exception_ptr make_error(uint8_t cls, const std::string& text) {
  switch (cls) {
    case kErrInvalid:
      return std::make_exception_ptr(InvalidArgument(text));
    case kErrTimeout:
      return std::make_exception_ptr(TimeoutError(text));
    case kErrPeerLost:
      return std::make_exception_ptr(PeerLost(text));
    case kErrIo:
      return std::make_exception_ptr(IoError(text));
    case kErrNotSupported:
      return std::make_exception_ptr(NotSupported(text));
    default:
      return std::make_exception_ptr(Error(text));
  }
}

}  // namespace cohort::rpc::detail
