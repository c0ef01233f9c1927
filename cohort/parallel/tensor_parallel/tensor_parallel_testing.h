// Test helper (header only, included by the tensor-parallel *_test.cc; not
// installed): the ranks of a native ProcessGroup as threads of this process,
// meeting in one in-process HashStore. Each call gets a group name of its own
// ("{prefix}-{pid}-{n}"), so that the groups of successive calls in one test
// binary never share a name.
#pragma once

#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::parallel::testing {

// Runs fn(group) as n ranks on threads; rethrows the first rank's failure
// once every rank has ended.
inline void run_ranks(const char* prefix, int n,
                      const std::function<void(std::shared_ptr<distributed::ProcessGroup>)>& fn) {
  static int counter = 0;
  auto store = std::make_shared<rendezvous::HashStore>();
  const std::string name = fmt::format("{}-{}-{}", prefix, ::getpid(), counter++);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        distributed::ProcessGroupOptions o;
        o.name = name;
        o.timeout = std::chrono::seconds(30);
        fn(distributed::ProcessGroup::create(distributed::BackendKind::kNative, store, r, n, o));
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace cohort::parallel::testing
