// ProcessGroup::submit, the one place an op is issued: inline for a blocking
// op on an idle group, queued otherwise (process_group.h, ProcessGroupStats).
// Internal to the distributed layer (process_group.cc and
// process_group_tensor.cc instantiate it).
#pragma once

#include <exception>
#include <functional>
#include <utility>

#include "cohort/distributed/process_group.h"
#include "cohort/distributed/work_queue.h"

namespace cohort::distributed {

template <typename Call>
Work ProcessGroup::submit(const char* op, bool collective, Duration timeout, bool async, Keep keep,
                          Call&& call) {
  uint64_t seq = 0;
  if (!async && begin_inline(op, collective, seq)) {
    // Nothing is queued or running and ops issued from now on queue behind
    // this one until the release: it runs here, in issue order.
    try {
      call();
    } catch (...) {
      fail_inline(op, collective, seq);
    }
    queue_->release();
    return Work();
  }
  // A queued op may outlive a blocking caller that gave up waiting, so it
  // owns references to its tensors.
  Tensor first = keep.first ? *keep.first : Tensor();
  Tensor second = keep.second ? *keep.second : Tensor();
  return enqueue(op, collective,
                 std::function<void()>([call = std::forward<Call>(call), first = std::move(first),
                                        second = std::move(second)]() mutable { call(); }),
                 timeout, async, std::move(keep.device_end), std::move(keep.source));
}

}  // namespace cohort::distributed
