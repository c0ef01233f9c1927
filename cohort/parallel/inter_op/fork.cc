#include "cohort/parallel/inter_op/fork.h"

#include <fmt/format.h>

namespace cohort::parallel::detail {

void rethrow_from_forked_task(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    std::throw_with_nested(Error(fmt::format("fork/wait: the forked task failed: {}", ex.what())));
  } catch (...) {
    std::throw_with_nested(
        Error("fork/wait: the forked task failed with a non-standard exception"));
  }
}

void throw_waited_twice() {
  throw InvalidArgument("fork/wait: wait() on a future that was already waited on (or moved from)");
}

}  // namespace cohort::parallel::detail
