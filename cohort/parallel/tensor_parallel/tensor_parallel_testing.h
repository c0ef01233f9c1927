// Test helper (header only, included by the tensor-parallel *_test.cc; not
// installed): the ranks of a native ProcessGroup as threads of this process,
// meeting in one in-process HashStore. Each call gets a group name of its own
// ("{prefix}-{pid}-{n}"), so that the groups of successive calls in one test
// binary never share a name.
#pragma once

#include <unistd.h>

#include <functional>
#include <memory>
#include <string>

#include "cohort/distributed/process_group.h"
#include "cohort/distributed/thread_ranks_testing.h"

namespace cohort::parallel::testing {

// Runs fn(group) as n ranks on threads; rethrows the first rank's failure
// once every rank has ended.
inline void run_ranks(const char* prefix, int n,
                      const std::function<void(std::shared_ptr<distributed::ProcessGroup>)>& fn) {
  static int counter = 0;
  distributed::testing::run_ranks_named(fmt::format("{}-{}-{}", prefix, ::getpid(), counter++), n,
                                        fn);
}

}  // namespace cohort::parallel::testing
