// Helpers for calling several workers at once and waiting for them, shared by
// the parameter-server client and the distributed optimizer.
//
// wait_all_or_first_error: waits until every future completed or one failed,
// whichever comes first -- one dead peer must fail the whole fan-out as soon
// as the RPC layer reports it, not after the other calls' deadlines. Throws
// the first failure (in `futures` order among those failed) with
// context(i) + " failed: " in front, keeping its class (rethrow_with_context);
// a future still pending after `timeout` (the calls' own deadline, plus a
// margin, normally fails them first) gives a TimeoutError naming context(i).
// Thread safety: call from one thread per set of futures.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "cohort/rpc/future.h"

namespace cohort::parallel {

std::vector<rpc::Message> wait_all_or_first_error(
    const std::vector<rpc::Future>& futures, std::chrono::milliseconds timeout,
    const std::function<std::string(size_t i)>& context);

// Rethrows `error` as the same cohort error class with `context` in front
// ("context: original message"); non-cohort exceptions become Error.
[[noreturn]] void rethrow_with_context(std::exception_ptr error, const std::string& context);

}  // namespace cohort::parallel
