// Test helper (not installed): ranks of a native ProcessGroup as threads of
// this process, meeting in one HashStore, for tests that need no real
// processes (process_group_test.cc, process_group_inline_test.cc, the
// tensor-parallel tests, distributed_checkpoint_test.cc).
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::distributed::testing {

// Runs fn(group) as n ranks of a group with `options` on threads; rethrows
// the first rank's failure once every rank has ended.
inline void run_ranks_with(int n, const ProcessGroupOptions& options,
                           const std::function<void(std::shared_ptr<ProcessGroup>)>& fn) {
  auto store = std::make_shared<rendezvous::HashStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(ProcessGroup::create(BackendKind::kNative, store, r, n, options));
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// The same for the group `name` with `timeout`.
inline void run_ranks_named(const std::string& name, int n,
                            const std::function<void(std::shared_ptr<ProcessGroup>)>& fn,
                            Duration timeout = std::chrono::seconds(30)) {
  ProcessGroupOptions o;
  o.name = name;
  o.timeout = timeout;
  run_ranks_with(n, o, fn);
}

inline void run_ranks(int n, const std::function<void(ProcessGroup&)>& fn,
                      Duration timeout = std::chrono::seconds(30)) {
  run_ranks_named(
      "test", n, [&](std::shared_ptr<ProcessGroup> pg) { fn(*pg); }, timeout);
}

}  // namespace cohort::distributed::testing
