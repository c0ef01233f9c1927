#include "cohort/launch/job_coordinator.h"

#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/rendezvous/wait_for_ranks.h"

namespace cohort::launch {
namespace {

const std::string kPrefix = "__cohort_launcher/";

std::string node_key(int attempt, int node) {
  return fmt::format("{}attempt{}/node{}", kPrefix, attempt, node);
}
std::string failure_key(int attempt) {
  return fmt::format("{}attempt{}/failure", kPrefix, attempt);
}

}  // namespace

JobCoordinator::JobCoordinator(JobCoordinatorOptions options) : o_(std::move(options)) {
  store_ = std::make_unique<rendezvous::TcpStore>(store_options(o_.connect_timeout));
}

JobCoordinator::~JobCoordinator() { stop_watch(); }

rendezvous::TcpStoreOptions JobCoordinator::store_options(std::chrono::milliseconds timeout) const {
  rendezvous::TcpStoreOptions so;
  so.host = o_.master_addr;
  so.port = static_cast<uint16_t>(o_.master_port);
  so.token = o_.token;
  so.timeout = std::chrono::duration_cast<rendezvous::Duration>(timeout);
  return so;
}

std::string JobCoordinator::store_name() const {
  return fmt::format("the job's store at {}:{} (node 0's cohort run)", o_.master_addr,
                     o_.master_port);
}

void JobCoordinator::join(int attempt, const std::string& about_this_node) {
  store_->set(node_key(attempt, o_.node_rank), about_this_node);
  std::vector<std::string> keys;
  for (int n = 0; n < o_.nnodes; ++n) keys.push_back(node_key(attempt, n));
  try {
    rendezvous::wait_for_ranks(
        *store_, keys, o_.node_rank,
        fmt::format("cohort run: waiting for the other nodes to {} (store {}:{})",
                    attempt == 0 ? "join" : "restart", o_.master_addr, o_.master_port),
        std::chrono::duration_cast<rendezvous::Duration>(o_.join_timeout),
        std::chrono::duration_cast<rendezvous::Duration>(o_.report_interval), "node");
  } catch (const TimeoutError&) {
    std::string missing;
    for (int n = 0; n < o_.nnodes; ++n) {
      if (!store_->check({keys[static_cast<size_t>(n)]}))
        missing += (missing.empty() ? "" : ", ") + std::to_string(n);
    }
    throw TimeoutError(fmt::format(
        "cohort run: node {}: node(s) {} of {} never {} within --join-timeout ({} s): start "
        "`cohort run --node-rank N` there with the same --master-addr ({}), --master-port ({}) "
        "and COHORT_TOKEN",
        o_.node_rank, missing, o_.nnodes, attempt == 0 ? "joined" : "came back for the restart",
        std::chrono::duration_cast<std::chrono::seconds>(o_.join_timeout).count(), o_.master_addr,
        o_.master_port));
  }
}

std::string JobCoordinator::report_failure(int attempt, const std::string& what,
                                           bool killed_by_signal) {
  const std::string key = failure_key(attempt);
  // The watcher already found the store gone: nobody to tell.
  if (std::optional<std::string> f = failure(); f && f->rfind("lost ", 0) == 0) return what;
  try {
    // A fresh connection with a short deadline: a cut link must not hold
    // this node's exit for the store's long time-out.
    rendezvous::TcpStore store(store_options(std::chrono::seconds(5)));
    rendezvous::Bytes desired(what.begin(), what.end());
    rendezvous::Bytes stood = store.compare_set(key, {}, desired);
    const std::string signal_key = key + "/signal";
    if (killed_by_signal) store.compare_set(signal_key, {}, desired);
    // The cause window: wait briefly for a killed worker elsewhere.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (true) {
      if (store.check({signal_key})) return store.get_string(signal_key);
      if (std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return std::string(stood.begin(), stood.end());
  } catch (const Error&) {
    return what;  // the store is gone: this node's failure is all it knows
  }
}

std::optional<std::string> JobCoordinator::recorded_failure(int attempt) {
  try {
    rendezvous::TcpStore store(store_options(std::chrono::seconds(5)));
    if (!store.check({failure_key(attempt)})) return std::nullopt;
    return store.get_string(failure_key(attempt));
  } catch (const Error& e) {
    return fmt::format("lost {}: {}", store_name(), e.what());
  }
}

void JobCoordinator::start_watch(int attempt) {
  stop_watch();
  {
    std::lock_guard<std::mutex> lock(mu_);
    failure_.reset();
  }
  stop_.store(false);
  watcher_ = std::thread([this, attempt] {
    // Its own connection, with short deadlines: a cut link shows as a
    // time-out within seconds, not at the store's long default.
    std::unique_ptr<rendezvous::TcpStore> store;
    auto fail = [&](std::string what) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_) failure_ = std::move(what);
    };
    try {
      store = std::make_unique<rendezvous::TcpStore>(store_options(std::chrono::seconds(5)));
      while (!stop_.load()) {
        if (store->check({failure_key(attempt)})) {
          fail(store->get_string(failure_key(attempt)));
          return;
        }
        std::this_thread::sleep_for(o_.watch_interval);
      }
    } catch (const std::exception& e) {
      if (!stop_.load()) fail(fmt::format("lost {}: {}", store_name(), e.what()));
    }
  });
}

void JobCoordinator::stop_watch() {
  stop_.store(true);
  if (watcher_.joinable()) watcher_.join();
}

std::optional<std::string> JobCoordinator::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

}  // namespace cohort::launch
