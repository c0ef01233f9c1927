#include "cohort/parallel/parameter_server/rpc_fanout.h"

#include <fmt/format.h>

#include <condition_variable>
#include <memory>
#include <mutex>

#include "cohort/base/error.h"

namespace cohort::parallel {

void rethrow_with_context(std::exception_ptr error, const std::string& context) {
  std::rethrow_exception(with_message(std::move(error), context + ": "));
}

std::vector<rpc::Message> wait_all_or_first_error(
    const std::vector<rpc::Future>& futures, std::chrono::milliseconds timeout,
    const std::function<std::string(size_t i)>& context) {
  struct Latch {
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    bool failed = false;
  };
  auto latch = std::make_shared<Latch>();
  for (const auto& f : futures) {
    f.then([latch](const rpc::Future& done) {
      std::lock_guard<std::mutex> lock(latch->mu);
      ++latch->done;
      if (done.error()) latch->failed = true;
      latch->cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(latch->mu);
    latch->cv.wait_for(lock, timeout + std::chrono::seconds(5),
                       [&] { return latch->failed || latch->done == futures.size(); });
  }
  for (size_t i = 0; i < futures.size(); ++i)
    if (futures[i].done() && futures[i].error())
      rethrow_with_context(futures[i].error(), context(i) + " failed");
  std::vector<rpc::Message> replies;
  replies.reserve(futures.size());
  for (size_t i = 0; i < futures.size(); ++i) {
    if (!futures[i].done())
      throw TimeoutError(fmt::format("{}: no reply within {} ms", context(i), timeout.count()));
    replies.push_back(futures[i].wait());
  }
  return replies;
}

}  // namespace cohort::parallel
