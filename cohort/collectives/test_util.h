// Test support for the collectives suites (header only, not library code):
// run a function as `n` ranks on threads (one HashStore) or as forked
// processes (one FileStore), the transports to run over, and deterministic
// inputs with a serial reference for every dtype and reduction. Inputs are
// small integers so every summation order gives the same bits and results
// can be compared exactly.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/collectives/communicator.h"
#include "cohort/collectives/knobs.h"
#include "cohort/collectives/reduce_kernels.h"
#include "cohort/collectives/reference_values.h"
#include "cohort/rendezvous/file_store.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::collectives::testing {

inline const std::vector<TransportKind>& transports() {
  static const std::vector<TransportKind> k{TransportKind::kShm, TransportKind::kTcp};
  return k;
}
inline const char* transport_label(TransportKind t) {
  return t == TransportKind::kTcp ? "tcp" : t == TransportKind::kShm ? "shm" : "auto";
}

inline std::string unique_name(const std::string& base) {
  static std::atomic<int> counter{0};
  return base + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

inline CommunicatorOptions options(TransportKind t, const std::string& name,
                                   Duration timeout = std::chrono::seconds(60)) {
  CommunicatorOptions o;
  o.name = unique_name(name);
  o.transport = t;
  o.timeout = timeout;
  return o;
}

// `o` with the collectives' knobs taken from this process's environment, as
// the env:// bootstrap does for a process group (knobs.h): the edge of a test
// that sets COHORT_TRANSPORT or COHORT_<OP>_ALGO and creates communicators
// itself.
inline CommunicatorOptions with_env_knobs(CommunicatorOptions o) {
  std::map<std::string, std::string> env;
  for (const std::string& name : knob_names()) {
    if (const char* v = std::getenv(name.c_str()); v != nullptr && *v != '\0') env[name] = v;
  }
  apply_knobs(env, o.transport, o.tuning);
  return o;
}

// Runs fn(comm) on n threads, one communicator each; rethrows the first
// rank's exception (by rank order).
inline void run_threads(int n, const CommunicatorOptions& opts,
                        const std::function<void(Communicator&)>& fn) {
  rendezvous::HashStore store;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = Communicator::create(store, r, n, opts);
        fn(*comm);
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

// Runs fn(rank, store) in n forked processes. A child exits 0 when fn
// returns, 1 with the message on stderr when it throws. Returns the exit
// statuses (as from waitpid) in rank order; kills children still running
// after `limit`.
inline std::vector<int> run_processes(int n, std::chrono::seconds limit,
                                      const std::function<void(int, rendezvous::Store&)>& fn) {
  std::string path = "/tmp/" + unique_name("cohort-comm-test-store");
  ::unlink(path.c_str());
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        rendezvous::FileStore store(path, std::chrono::seconds(60));
        fn(r, store);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> status(static_cast<size_t>(n), -1);
  auto deadline = std::chrono::steady_clock::now() + limit;
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (status[static_cast<size_t>(r)] != -1) continue;
      int st = 0;
      if (::waitpid(pids[static_cast<size_t>(r)], &st, WNOHANG) > 0) {
        status[static_cast<size_t>(r)] = st;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r) {
        if (status[static_cast<size_t>(r)] == -1) {
          ::kill(pids[static_cast<size_t>(r)], SIGKILL);
          ::waitpid(pids[static_cast<size_t>(r)], nullptr, 0);
          ADD_FAILURE() << "rank " << r << " did not finish within " << limit.count() << " s";
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::unlink(path.c_str());
  return status;
}

inline bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

inline const std::vector<DataType>& all_dtypes() {
  static const std::vector<DataType> d{DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                                       DataType::kInt64,   DataType::kUInt8,   DataType::kBFloat16,
                                       DataType::kFloat16, DataType::kInt8,    DataType::kBool};
  return d;
}
// Every reduction; pair them with dtypes through reduction_defined (types.h).
inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> o{ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProduct,
                                       ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kBand,
                                       ReduceOp::kBor, ReduceOp::kBxor};
  return o;
}

inline std::vector<std::byte> make_input(int rank, size_t count, DataType dtype, ReduceOp op) {
  size_t es = element_size(dtype);
  std::vector<std::byte> out(count * es);
  for (size_t i = 0; i < count; ++i)
    store_value(&out[i * es], dtype, input_value(rank, i, op, dtype));
  return out;
}

// Serial reference of the reduction over ranks [0, n) of make_input.
inline std::vector<std::byte> reference_reduce(int n, size_t count, DataType dtype, ReduceOp op) {
  size_t es = element_size(dtype);
  std::vector<std::byte> out(count * es);
  for (size_t i = 0; i < count; ++i)
    store_value(&out[i * es], dtype, reference_value(n, i, op, dtype));
  return out;
}

inline std::string case_name(int n, size_t count, DataType dtype, ReduceOp op) {
  return "n=" + std::to_string(n) + " count=" + std::to_string(count) +
         " dtype=" + std::string(dtype_name(dtype)) + " op=" + std::string(reduce_op_name(op));
}

}  // namespace cohort::collectives::testing
