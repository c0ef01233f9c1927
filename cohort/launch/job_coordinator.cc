#include "cohort/launch/job_coordinator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::launch {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kPrefix = "__cohort_launcher/";
const std::string kStoppedKey = kPrefix + "stopped";
const std::string kLinkKey = kPrefix + "link_port";  // node 0's launcher link

std::string node_key(int attempt, int node) {
  return fmt::format("{}attempt{}/node{}", kPrefix, attempt, node);
}
std::string failure_key(int attempt) {
  return fmt::format("{}attempt{}/failure", kPrefix, attempt);
}
std::string exit_key(int attempt, int node) {
  return fmt::format("{}attempt{}/exit/node{}", kPrefix, attempt, node);
}
std::string left_key(int attempt, int node) {
  return fmt::format("{}attempt{}/left/node{}", kPrefix, attempt, node);
}

std::string as_string(const rendezvous::Bytes& b) { return std::string(b.begin(), b.end()); }
rendezvous::Bytes as_bytes(const std::string& s) { return rendezvous::Bytes(s.begin(), s.end()); }

int64_t seconds(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

// Waits are cut into slices so a waiting node also notices a stopped job, a
// lost store, and when to say it still waits.
constexpr std::chrono::milliseconds kSlice(250);

}  // namespace

JobCoordinator::JobCoordinator(JobCoordinatorOptions options) : o_(std::move(options)) {
  try {
    store_ = std::make_unique<rendezvous::TcpStore>(store_options(o_.connect_timeout));
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format("node {} could not reach {} within --connect-timeout ({} s): {}",
                                   o_.node_rank, store_name(), seconds(o_.connect_timeout),
                                   e.what()));
  } catch (const Error& e) {
    throw IoError(fmt::format("node {} could not join the job through {}: {}", o_.node_rank,
                              store_name(), e.what()));
  }
  if (o_.node_rank == 0) {
    link_ = std::make_unique<LauncherLink>(link_options(), o_.link_bind_host);
    store_->set(kLinkKey, std::to_string(link_->port()));
  }
}

LauncherLinkOptions JobCoordinator::link_options() const {
  LauncherLinkOptions lo;
  lo.nnodes = o_.nnodes;
  lo.node_rank = o_.node_rank;
  lo.token = o_.token;
  lo.host = o_.host;
  lo.address = o_.address;
  lo.pid = ::getpid();
  lo.heartbeat = o_.heartbeat;
  lo.silence_limit = o_.silence_limit;
  return lo;
}

// Node k > 0: links to node 0's launcher (whose port node 0 put in the store
// when it started) before announcing itself.
void JobCoordinator::link_up(Clock::time_point deadline, const std::string& during) {
  while (!store_->check({kLinkKey})) {
    check_interrupted(during);
    if (Clock::now() >= deadline) {
      throw TimeoutError(
          fmt::format("node {}: node 0's launcher never published its link in {} "
                      "within --join-timeout ({} s)",
                      o_.node_rank, store_name(), seconds(o_.join_timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string port = store_->get_string(kLinkKey);
  const auto link_deadline = std::min(deadline, Clock::now() + o_.connect_timeout);
  try {
    link_ = std::make_unique<LauncherLink>(link_options(), o_.master_addr,
                                           static_cast<uint16_t>(std::stoi(port)), link_deadline);
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error& e) {
    throw Error(e.what());  // not the store's loss (an IoError here): it answered
  }
}

std::vector<int> JobCoordinator::live_nodes() const {
  std::vector<int> out;
  for (int n = 0; n < o_.nnodes; ++n)
    if (!link_ || !link_->is_lost(n)) out.push_back(n);
  return out;
}

std::optional<std::string> JobCoordinator::launcher_lost() const {
  return link_ ? link_->lost() : std::nullopt;
}

int JobCoordinator::lost_fd() const { return link_ ? link_->lost_fd() : -1; }

bool JobCoordinator::store_gone() const {
  if (link_ && link_->is_lost(0)) return true;
  const std::optional<std::string> f = watched();
  return f && f->find("lost the job's store") == 0;
}

void JobCoordinator::leave() {
  if (link_) link_->leave();
}

void JobCoordinator::announce_lost(int attempt, const std::string& why) {
  if (store_gone()) return;
  try {
    rendezvous::TcpStore store(store_options(std::chrono::seconds(2)));
    store.compare_set(kStoppedKey, {}, as_bytes(why));
    store.compare_set(failure_key(attempt), {}, as_bytes(why));
  } catch (const Error&) {
    // The store is gone or unreachable: the others find that out themselves.
  }
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
  return fmt::format("the job's store at {}:{} (node 0)", o_.master_addr, o_.master_port);
}

void JobCoordinator::throw_lost(const std::string& during, const std::exception& e) const {
  throw IoError(
      fmt::format("lost {} while {} (node {}): {}", store_name(), during, o_.node_rank, e.what()));
}

void JobCoordinator::say(const std::string& line) const {
  if (o_.report) o_.report(line);
}

void JobCoordinator::check_interrupted(const std::string& during) const {
  if (!o_.interrupted) return;
  if (int sig = o_.interrupted()) {
    const char* name = ::sigabbrev_np(sig);
    throw Error(
        fmt::format("node {}: stopped by SIG{} while {}", o_.node_rank, name ? name : "?", during));
  }
}

void JobCoordinator::join(int attempt, const std::string& about_this_node) {
  const std::string during =
      attempt == 0 ? "joining the job" : fmt::format("joining restart {}", attempt);
  const std::string verb = attempt == 0 ? "join" : fmt::format("come back for restart {}", attempt);
  std::vector<std::string> keys;
  for (int n = 0; n < o_.nnodes; ++n) keys.push_back(node_key(attempt, n));
  const auto start = Clock::now();
  const auto deadline = start + o_.join_timeout;
  auto next_report = start + o_.report_interval;
  bool reported = false;
  try {
    auto missing = [&] {
      std::vector<int> out;
      for (int n = 0; n < o_.nnodes; ++n)
        if (!store_->check({keys[static_cast<size_t>(n)]})) out.push_back(n);
      return out;
    };
    if (o_.node_rank != 0 && !link_) link_up(deadline, during);
    store_->set(node_key(attempt, o_.node_rank), about_this_node);
    while (true) {
      check_interrupted(during);
      if (std::optional<std::string> lost = launcher_lost()) throw Error(*lost);
      if (store_->check({kStoppedKey})) {
        throw Error(fmt::format("node {}: the job was stopped: {}", o_.node_rank,
                                store_->get_string(kStoppedKey)));
      }
      const auto now = Clock::now();
      const auto slice =
          std::clamp<Clock::duration>(deadline - now, std::chrono::milliseconds(1), kSlice);
      try {
        store_->wait(keys, std::chrono::duration_cast<rendezvous::Duration>(slice));
        break;
      } catch (const TimeoutError&) {
      }
      if (Clock::now() >= deadline) {
        const std::vector<int> m = missing();
        if (m.empty()) break;
        throw TimeoutError(fmt::format(
            "node {}: node(s) {} of {} never {} within --join-timeout ({} s): start "
            "`cohort run --node-rank N` there with the same --nnodes ({}), --master-addr ({}), "
            "--master-port ({}) and COHORT_TOKEN",
            o_.node_rank, fmt::join(m, ", "), o_.nnodes,
            attempt == 0 ? "joined" : fmt::format("came back for restart {}", attempt),
            seconds(o_.join_timeout), o_.nnodes, o_.master_addr, o_.master_port));
      }
      if (Clock::now() >= next_report) {
        const std::vector<int> m = missing();
        if (!m.empty()) {
          say(fmt::format(
              "cohort run: node {} waiting for node(s) {} of {} to {} (store {}:{}), {} s\n",
              o_.node_rank, fmt::join(m, ", "), o_.nnodes, verb, o_.master_addr, o_.master_port,
              seconds(Clock::now() - start)));
          reported = true;
        }
        next_report += o_.report_interval;
      }
    }
  } catch (const TimeoutError&) {
    throw;
  } catch (const IoError& e) {
    if (std::optional<std::string> lost = launcher_lost()) throw Error(*lost);
    throw_lost(during, e);
  }
  // Every node linked before it announced itself; one may have died since.
  if (std::optional<std::string> lost = launcher_lost()) throw Error(*lost);
  if (reported) {
    say(fmt::format("cohort run: node {}: all {} nodes {} after {} s\n", o_.node_rank, o_.nnodes,
                    attempt == 0 ? "joined" : "came back", seconds(Clock::now() - start)));
  }
}

std::string JobCoordinator::report_failure(int attempt, const std::string& what,
                                           bool killed_by_signal) {
  const std::string key = failure_key(attempt);
  // A lost launcher took this node's workers' peers with it: it is the cause,
  // and there is no window to wait out (announce_lost tells the others).
  if (!killed_by_signal)
    if (std::optional<std::string> lost = launcher_lost()) return *lost;
  // Node 0 or its store is gone: nobody to tell, and a lost launcher is the cause.
  if (store_gone()) return launcher_lost().value_or(what);
  try {
    // A fresh connection with a short deadline: a cut link must not hold
    // this node's exit for the store's long time-out.
    rendezvous::TcpStore store(store_options(std::chrono::seconds(5)));
    const rendezvous::Bytes desired = as_bytes(what);
    rendezvous::Bytes stood = store.compare_set(key, {}, desired);
    const std::string signal_key = key + "/signal";
    if (killed_by_signal) store.compare_set(signal_key, {}, desired);
    // The cause window: wait briefly for a killed worker elsewhere.
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (true) {
      if (store.check({signal_key})) return store.get_string(signal_key);
      // A lost launcher took this node's workers' peers with it.
      if (!killed_by_signal)
        if (std::optional<std::string> lost = launcher_lost()) return *lost;
      if (Clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return as_string(stood);
  } catch (const Error&) {
    return what;  // the store is gone: this node's failure is all it knows
  }
}

void JobCoordinator::announce_stop(int attempt, const std::string& why) {
  try {
    rendezvous::TcpStore store(store_options(std::chrono::seconds(2)));
    store.compare_set(kStoppedKey, {}, as_bytes(why));
    store.compare_set(failure_key(attempt), {}, as_bytes(why));
    // Nobody waits for this node at the end of the attempt.
    store.set(exit_key(attempt, o_.node_rank), std::string("1"));
    store.set(left_key(attempt, o_.node_rank), std::string("1"));
  } catch (const Error&) {
    // The store is gone or unreachable: the others find that out themselves.
  }
}

bool JobCoordinator::job_stopped() {
  try {
    rendezvous::TcpStore store(store_options(std::chrono::seconds(2)));
    return store.check({kStoppedKey});
  } catch (const Error&) {
    return false;  // joining the next attempt will name the lost store
  }
}

std::optional<std::string> JobCoordinator::finish(int attempt, bool watch_failure,
                                                  std::chrono::milliseconds limit) {
  // A lost node is not waited for (it will never come).
  auto keys_of = [&](auto key) {
    std::vector<std::string> out;
    for (int n : live_nodes()) out.push_back(key(attempt, n));
    return out;
  };
  const auto start = Clock::now();
  const auto deadline = start + limit;
  try {
    auto recorded = [&]() -> std::optional<std::string> {
      if (!watch_failure) return std::nullopt;
      if (std::optional<std::string> lost = launcher_lost()) return lost;
      if (!store_->check({failure_key(attempt)})) return std::nullopt;
      return store_->get_string(failure_key(attempt));
    };
    store_->set(exit_key(attempt, o_.node_rank), std::string("1"));
    while (true) {
      check_interrupted("waiting for the other nodes at the end of the attempt");
      if (std::optional<std::string> f = recorded()) return f;
      const auto slice = std::clamp<Clock::duration>(deadline - Clock::now(),
                                                     std::chrono::milliseconds(1), kSlice);
      try {
        store_->wait(keys_of(exit_key), std::chrono::duration_cast<rendezvous::Duration>(slice));
        break;
      } catch (const TimeoutError&) {
      }
      if (Clock::now() >= deadline) {
        std::vector<int> running;
        for (int n : live_nodes())
          if (!store_->check({exit_key(attempt, n)})) running.push_back(n);
        if (running.empty()) break;
        throw TimeoutError(fmt::format(
            "node {}: node(s) {} of {} still running their workers {} s after this "
            "node's ended (exit barrier)",
            o_.node_rank, fmt::join(running, ", "), o_.nnodes, seconds(Clock::now() - start)));
      }
    }
    // A failure written just before the last node reached the barrier.
    if (std::optional<std::string> f = recorded()) return f;
    store_->set(left_key(attempt, o_.node_rank), std::string("1"));
    // Node 0 serves the store: it leaves last, once every node has seen the
    // barrier done (briefly: a node that died on the way is not waited for).
    if (o_.node_rank == 0) {
      const auto until = Clock::now() + std::chrono::seconds(10);
      while (Clock::now() < until) {
        try {
          store_->wait(keys_of(left_key), std::chrono::duration_cast<rendezvous::Duration>(kSlice));
          break;
        } catch (const TimeoutError&) {
        }
      }
    }
    return std::nullopt;
  } catch (const TimeoutError&) {
    throw;
  } catch (const IoError& e) {
    throw_lost("waiting for the other nodes at the end of the attempt", e);
  }
}

// The watcher's state is shared with its thread, so that a thread stuck in
// a store call to a node 0 known lost (a cut link: up to the call's 5 s
// slack) can be let go instead of holding this launcher's exit.
struct JobCoordinator::Watch {
  std::atomic<bool> stop{false};
  std::mutex mu;
  // Wakes the thread between checks when stop is set: the attempt's end
  // (and the launcher's exit) does not wait out a watch interval.
  std::condition_variable wake;
  std::optional<std::string> failure;
};

void JobCoordinator::start_watch(int attempt) {
  stop_watch();
  auto watch = std::make_shared<Watch>();
  watch_ = watch;
  watcher_ = std::thread([watch, attempt, options = store_options(std::chrono::seconds(5)),
                          interval = o_.watch_interval, name = store_name()] {
    // Its own connection, with short deadlines: a cut link shows as a
    // time-out within seconds, not at the store's long default.
    std::unique_ptr<rendezvous::TcpStore> store;
    auto fail = [&](std::string what) {
      std::lock_guard<std::mutex> lock(watch->mu);
      if (!watch->failure) watch->failure = std::move(what);
    };
    try {
      store = std::make_unique<rendezvous::TcpStore>(options);
      while (!watch->stop.load()) {
        if (store->check({failure_key(attempt)})) {
          fail(store->get_string(failure_key(attempt)));
          return;
        }
        std::unique_lock<std::mutex> lock(watch->mu);
        watch->wake.wait_for(lock, interval, [&] { return watch->stop.load(); });
      }
    } catch (const std::exception& e) {
      if (!watch->stop.load()) fail(fmt::format("lost {}: {}", name, e.what()));
    }
  });
}

void JobCoordinator::stop_watch() {
  if (!watcher_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(watch_->mu);
    watch_->stop.store(true);
  }
  watch_->wake.notify_all();
  // Node 0's launcher is lost: the thread may wait out a store call to it;
  // it ends by itself (it holds only its own state).
  if (link_ && link_->is_lost(0)) {
    watcher_.detach();
  } else {
    watcher_.join();
  }
}

std::optional<std::string> JobCoordinator::watched() const {
  if (!watch_) return std::nullopt;
  std::lock_guard<std::mutex> lock(watch_->mu);
  return watch_->failure;
}

std::optional<std::string> JobCoordinator::failure() const {
  if (std::optional<std::string> lost = launcher_lost()) return lost;
  return watched();
}

}  // namespace cohort::launch
