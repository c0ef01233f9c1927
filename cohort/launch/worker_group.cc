#include "cohort/launch/worker_group.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <memory>

#include "cohort/base/error.h"
#include "cohort/launch/line_prefixer.h"
#include "cohort/transport/shm_segment.h"

namespace cohort::launch {
namespace {

using Clock = std::chrono::steady_clock;

struct Worker {
  const WorkerSpec* spec;
  ChildProcess proc;
  std::unique_ptr<LinePrefixer> out, err;
  std::optional<ExitStatus> status;
  bool reported = false;  // its failure was looked at
  int restarts = 0;       // started again in place (max_worker_restarts)
};

// Reads what is available on fd into prefixer; returns false at end of stream.
bool pump(int fd, LinePrefixer& prefixer) {
  char buf[64 * 1024];
  for (int round = 0; round < 16; ++round) {  // bounded, so one chatty worker cannot starve
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r > 0) {
      prefixer.feed(std::string_view(buf, static_cast<size_t>(r)));
      continue;
    }
    if (r == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

const char* signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? abbrev : "?";
}

// True when a worker ended by a signal the launcher did not send: it stops
// workers with SIGTERM, and with SIGKILL only once `killed_by_us`.
bool died_on_its_own(const ExitStatus& status, bool killed_by_us) {
  if (status.signal == 0 || status.signal == SIGTERM) return false;
  return !(killed_by_us && status.signal == SIGKILL);
}

}  // namespace

WorkerGroup::WorkerGroup(std::vector<WorkerSpec> workers, WorkerGroupOptions options)
    : specs_(std::move(workers)), options_(options) {}

AttemptResult WorkerGroup::run(SignalWatcher& signals) {
  auto report = fd_sink(options_.stderr_fd);
  std::vector<Worker> workers;
  workers.reserve(specs_.size());
  for (const auto& spec : specs_) {
    ChildSpec child = spec.child;
    child.capture_output = true;
    Worker w{&spec, ChildProcess::exec(child), nullptr, nullptr, std::nullopt, false};
    if (options_.orphan_guard) options_.orphan_guard->watch(w.proc.pid());
    std::string prefix =
        options_.prefix_output ? fmt::format("[rank {}] ", spec.rank) : std::string();
    w.out = std::make_unique<LinePrefixer>(prefix, fd_sink(options_.stdout_fd));
    w.err = std::make_unique<LinePrefixer>(prefix, fd_sink(options_.stderr_fd));
    workers.push_back(std::move(w));
  }

  AttemptResult result;
  bool stopping = false, killed = false;
  Clock::time_point kill_deadline, first_failure_at;
  // How long after the first failure a worker found killed by a signal still
  // counts as its cause (peers notice a death within a fraction of a second).
  constexpr auto kCauseWindow = std::chrono::seconds(2);
  auto stop_all = [&](int sig) {
    for (auto& w : workers) {
      if (!w.status) w.proc.signal(sig);
    }
  };
  // Starts w again in its place, as a replacement.
  auto restart = [&](Worker& w) {
    // Whatever the dead one still had in its pipes, then the new one's.
    if (w.proc.stdout_fd() >= 0) pump(w.proc.stdout_fd(), *w.out);
    if (w.proc.stderr_fd() >= 0) pump(w.proc.stderr_fd(), *w.err);
    w.out->finish();
    w.err->finish();
    transport::remove_segments_of(w.proc.pid());
    ChildSpec child = w.spec->child;
    child.capture_output = true;
    child.env.push_back("COHORT_FT_REPLACEMENT=1");
    w.proc = ChildProcess::exec(child);
    if (options_.orphan_guard) options_.orphan_guard->watch(w.proc.pid());
    w.status.reset();
    w.reported = false;
  };
  // Replicas of replica_size workers (by local rank): the failing ones, and
  // the restarts of each.
  const int per = options_.replica_size;
  std::vector<char> failing(workers.size() / static_cast<size_t>(per) + 1, 0);
  std::vector<int> replica_restarts(failing.size(), 0);
  auto members = [&](int k) {
    std::vector<Worker*> out;
    for (auto& o : workers)
      if (o.spec->local_rank / per == k) out.push_back(&o);
    return out;
  };
  auto fail_replica = [&](Worker& w) {
    const int k = w.spec->local_rank / per;
    if (failing[static_cast<size_t>(k)]) return;  // one of the replica's, stopped with it
    failing[static_cast<size_t>(k)] = 1;
    report(fmt::format(
        "cohort run: rank {} (local rank {}, pid {}) {}; its replica (local ranks {}-{}) fails "
        "as one: stopping its other workers\n",
        w.spec->rank, w.spec->local_rank, w.proc.pid(), w.status->describe(), k * per,
        k * per + per - 1));
    for (Worker* o : members(k))
      if (!o->status) o->proc.signal(SIGKILL);
  };
  // Failing replicas whose workers all ended: started again together, or lost.
  auto restart_replicas = [&] {
    bool any_success = false;
    for (const auto& o : workers) any_success = any_success || (o.status && o.status->success());
    bool restarted = false;
    for (size_t k = 0; k < failing.size(); ++k) {
      if (!failing[k]) continue;
      const std::vector<Worker*> ws = members(static_cast<int>(k));
      if (std::any_of(ws.begin(), ws.end(), [](Worker* o) { return !o->status; })) continue;
      failing[k] = 0;
      const int first = static_cast<int>(k) * per;
      if (!any_success && replica_restarts[k] < options_.max_worker_restarts) {
        ++replica_restarts[k];
        report(fmt::format(
            "cohort run: restarting the replica of local ranks {}-{} into the running job, its "
            "{} workers together (restart {} of {} for this replica), the others go on\n",
            first, first + per - 1, per, replica_restarts[k], options_.max_worker_restarts));
        for (Worker* o : ws) {
          ++o->restarts;
          ++result.worker_restarts;
          restart(*o);
        }
        restarted = true;
        continue;
      }
      report(
          fmt::format("cohort run: the replica of local ranks {}-{} is lost ({}), the others "
                      "go on\n",
                      first, first + per - 1,
                      any_success ? "a worker of this node already finished the job"
                                  : "no restarts left for it"));
      for (Worker* o : ws)
        if (!o->status->success())
          result.lost.push_back(
              WorkerFailure{o->spec->rank, o->spec->local_rank, o->proc.pid(), *o->status});
    }
    return restarted;
  };
  auto begin_stop = [&] {
    if (stopping) return;
    stopping = true;
    kill_deadline = Clock::now() + options_.grace;
    stop_all(SIGTERM);
  };

  while (true) {
    if (!stopping && options_.external_stop) {
      if (std::optional<std::string> why = options_.external_stop()) {
        result.stopped_by = *why;
        report(fmt::format("cohort run: {}; stopping the workers on this node\n", *why));
        begin_stop();
      }
    }
    bool all_ended = true;
    for (auto& w : workers) {
      if (!w.status) {
        w.status = w.proc.poll();
        // Reaped: its process group id may now be reused by someone else.
        if (w.status && options_.orphan_guard) options_.orphan_guard->forget(w.proc.pid());
      }
      if (!w.status) {
        all_ended = false;
        continue;
      }
      if (w.status->success() || result.interrupted_by || !result.stopped_by.empty() || w.reported)
        continue;
      w.reported = true;
      if (options_.max_worker_restarts >= 0 && !stopping && options_.replica_size > 1) {
        fail_replica(w);
        continue;
      }
      if (options_.max_worker_restarts >= 0 && !stopping) {
        bool others_run = false;
        for (const auto& o : workers) others_run = others_run || (&o != &w && !o.status);
        if (others_run && w.restarts < options_.max_worker_restarts) {
          ++w.restarts;
          ++result.worker_restarts;
          report(fmt::format(
              "cohort run: rank {} (local rank {}, pid {}) {}; restarting it into the running job "
              "(restart {} of {} for this worker), the others go on\n",
              w.spec->rank, w.spec->local_rank, w.proc.pid(), w.status->describe(), w.restarts,
              options_.max_worker_restarts));
          restart(w);
          all_ended = false;
          continue;
        }
        result.lost.push_back(
            WorkerFailure{w.spec->rank, w.spec->local_rank, w.proc.pid(), *w.status});
        report(fmt::format("cohort run: rank {} (local rank {}, pid {}) {}; {}, the others go on\n",
                           w.spec->rank, w.spec->local_rank, w.proc.pid(), w.status->describe(),
                           others_run ? "no restarts left for it" : "the others have ended"));
        continue;
      }
      if (!result.failure && !stopping &&
          static_cast<int>(result.lost.size()) < options_.max_lost_workers) {
        result.lost.push_back(
            WorkerFailure{w.spec->rank, w.spec->local_rank, w.proc.pid(), *w.status});
        report(fmt::format(
            "cohort run: rank {} (local rank {}, pid {}) {}; lost worker {} of {} tolerated "
            "(--max-lost-workers), the others go on\n",
            w.spec->rank, w.spec->local_rank, w.proc.pid(), w.status->describe(),
            result.lost.size(), options_.max_lost_workers));
        continue;
      }
      if (!result.failure) {
        result.failure = WorkerFailure{w.spec->rank, w.spec->local_rank, w.proc.pid(), *w.status};
        report(
            fmt::format("cohort run: rank {} (local rank {}, pid {}) {}; stopping the other "
                        "workers\n",
                        w.spec->rank, w.spec->local_rank, w.proc.pid(), w.status->describe()));
        first_failure_at = Clock::now();
        begin_stop();
      } else if (result.failure->status.signal == 0 && died_on_its_own(*w.status, killed) &&
                 Clock::now() - first_failure_at < kCauseWindow) {
        // A worker killed from outside takes its peers down with it: they see
        // the lost connection and exit with an error, sometimes before the
        // launcher reaps the killed one. The killed worker is the cause.
        report(
            fmt::format("cohort run: rank {} (local rank {}, pid {}) {}; naming it as the "
                        "cause of rank {}'s failure\n",
                        w.spec->rank, w.spec->local_rank, w.proc.pid(), w.status->describe(),
                        result.failure->rank));
        result.failure = WorkerFailure{w.spec->rank, w.spec->local_rank, w.proc.pid(), *w.status};
      }
    }
    if (!stopping && options_.replica_size > 1 && restart_replicas()) all_ended = false;
    if (all_ended) break;
    if (stopping && !killed && Clock::now() >= kill_deadline) {
      int left = 0;
      for (auto& w : workers) left += w.status ? 0 : 1;
      report(
          fmt::format("cohort run: {} worker{} still running after the {} ms grace period; "
                      "sending SIGKILL\n",
                      left, left == 1 ? "" : "s", options_.grace.count()));
      stop_all(SIGKILL);
      killed = true;
    }

    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, bool>> owners;  // (worker, is_stdout) per pipe fd
    fds.push_back({signals.fd(), POLLIN, 0});
    for (auto& w : workers) {
      if (w.proc.stdout_fd() >= 0) {
        fds.push_back({w.proc.stdout_fd(), POLLIN, 0});
        owners.emplace_back(&w, true);
      }
      if (w.proc.stderr_fd() >= 0) {
        fds.push_back({w.proc.stderr_fd(), POLLIN, 0});
        owners.emplace_back(&w, false);
      }
    }
    // A lost launcher elsewhere: looked at, at the loop's top, the moment it is seen.
    if (!stopping && options_.external_stop_fd >= 0)
      fds.push_back({options_.external_stop_fd, POLLIN, 0});
    // SIGCHLD wakes the poll; the cap is a backstop for a missed wake-up.
    auto wake = Clock::now() + std::chrono::milliseconds(250);
    if (stopping && !killed) wake = std::min(wake, kill_deadline);
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(ms, 0)));
    if (rc < 0 && errno != EINTR) throw_errno("cohort run: poll", errno);
    if (rc <= 0) continue;

    if (fds[0].revents) {
      for (int sig : signals.take()) {
        if (sig != SIGINT && sig != SIGTERM) continue;  // SIGCHLD: reaped at the loop top
        if (!result.interrupted_by) {
          result.interrupted_by = sig;
          report(fmt::format("cohort run: got SIG{}; forwarding it to the workers\n",
                             signal_name(sig)));
          stopping = true;
          kill_deadline = Clock::now() + options_.grace;
          stop_all(sig);
          if (options_.on_interrupt) options_.on_interrupt(sig);
        } else if (!killed) {
          report("cohort run: second signal; killing the workers\n");
          stop_all(SIGKILL);
          killed = true;
        }
      }
    }
    for (size_t i = 1; i <= owners.size(); ++i) {
      if (!fds[i].revents) continue;
      auto [w, is_out] = owners[i - 1];
      LinePrefixer& p = is_out ? *w->out : *w->err;
      if (!pump(fds[i].fd, p)) {
        p.finish();
        is_out ? w->proc.close_stdout() : w->proc.close_stderr();
      }
    }
  }

  // Everything has ended: take what is still in the pipes (a grandchild that
  // keeps them open is not waited for) and end partial lines; remove shared
  // memory a worker killed during its bootstrap left named.
  for (auto& w : workers) {
    transport::remove_segments_of(w.proc.pid());
    if (w.proc.stdout_fd() >= 0) pump(w.proc.stdout_fd(), *w.out);
    if (w.proc.stderr_fd() >= 0) pump(w.proc.stderr_fd(), *w.err);
    w.out->finish();
    w.err->finish();
  }
  return result;
}

}  // namespace cohort::launch
