#include "cohort/launch/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>

#include "cohort/base/parallel.h"
#include "cohort/launch/cpu_split.h"
#include "cohort/launch/launcher.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "cohort/rendezvous/token.h"
#include "cohort/transport/socket.h"

namespace cohort {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxMessage = 4000;  // below the pipe buffer: the child's write never blocks

struct Child {
  int rank = 0;
  launch::ChildProcess proc;
  UniqueFd error_pipe;  // read end; EOF when the child has ended
  std::string message;  // the exception text the child sent
  std::optional<launch::ExitStatus> status;
};

// Reads what the child sent; returns false at end of stream.
bool drain(Child& c) {
  char buf[1024];
  while (true) {
    ssize_t r = ::read(c.error_pipe.get(), buf, sizeof(buf));
    if (r > 0) {
      c.message.append(buf, static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

void stop_all(std::vector<Child>& children, std::chrono::milliseconds grace) {
  for (auto& c : children) c.proc.signal(SIGTERM);
  auto deadline = Clock::now() + grace;
  while (Clock::now() < deadline) {
    bool any = false;
    for (auto& c : children) any = any || c.proc.running();
    if (!any) return;
    ::poll(nullptr, 0, 20);
  }
  for (auto& c : children) c.proc.kill_and_reap();
}

}  // namespace

void spawn(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& options) {
  COHORT_CHECK(nprocs >= 1, "spawn: nprocs must be >= 1, got {}", nprocs);
  std::string token = rendezvous::generate_token();
  uint16_t port = 0;
  // Bound before forking so children know the port; served after, so no
  // server thread exists while forking.
  UniqueFd listener = transport::listen_tcp("127.0.0.1", 0, &port);
  std::vector<std::vector<int>> shares;
  if (options.pin) shares = launch::split_cpus(launch::allowed_cpus(), nprocs);

  launch::LaunchOptions lo;
  lo.nproc_per_node = nprocs;
  lo.extra_env = options.extra_env;
  std::vector<Child> children;
  children.reserve(static_cast<size_t>(nprocs));
  for (int rank = 0; rank < nprocs; ++rank) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("spawn: pipe", errno);
    UniqueFd read_end(fds[0]), write_end(fds[1]);
    int threads = options.pin ? static_cast<int>(shares[static_cast<size_t>(rank)].size()) : 0;
    auto env = launch::worker_env(lo, rank, port, token, 0, threads);
    launch::ChildSpec spec;
    spec.null_stdin = false;
    if (options.pin) spec.cpus = shares[static_cast<size_t>(rank)];
    int listen_fd = listener.get(), read_fd = read_end.get(), write_fd = write_end.get();
    auto body = [&, rank, threads, listen_fd, read_fd, write_fd]() -> int {
      ::close(listen_fd);
      ::close(read_fd);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      if (threads > 0) {
        set_default_num_threads(threads);
        set_num_threads(threads);
      }
      try {
        fn(rank);
        return 0;
      } catch (const std::exception& e) {
        std::string msg = e.what();
        if (msg.size() > kMaxMessage) msg.resize(kMaxMessage);
        [[maybe_unused]] ssize_t w = ::write(write_fd, msg.data(), msg.size());
      } catch (...) {
        static const char kUnknown[] = "unknown exception";
        [[maybe_unused]] ssize_t w = ::write(write_fd, kUnknown, sizeof(kUnknown) - 1);
      }
      return 1;
    };
    Child c;
    c.rank = rank;
    c.proc = launch::ChildProcess::fork_call(spec, body);
    write_end.reset();
    ::fcntl(read_end.get(), F_SETFL, ::fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
    c.error_pipe = std::move(read_end);
    children.push_back(std::move(c));
  }

  rendezvous::TcpStoreServerOptions so;
  so.token = token;
  rendezvous::TcpStoreServer server(std::move(listener), so);

  auto deadline = Clock::now() + options.timeout;
  while (true) {
    bool all_done = true;
    for (auto& c : children) {
      if (!c.status) c.status = c.proc.poll();
      if (!c.status) {
        all_done = false;
        continue;
      }
      if (c.status->success()) continue;
      if (c.error_pipe.valid()) drain(c);
      stop_all(children, options.grace);
      std::string cause = c.message.empty()
                              ? c.status->describe()
                              : fmt::format("{} ({})", c.message, c.status->describe());
      throw SpawnError(fmt::format("spawn: rank {} of {} failed: {}", c.rank, nprocs, cause),
                       c.rank, *c.status);
    }
    if (all_done) return;
    if (Clock::now() >= deadline) {
      stop_all(children, std::chrono::milliseconds(0));
      throw TimeoutError(fmt::format("spawn: {} processes still running after {} ms", nprocs,
                                     options.timeout.count()));
    }
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (auto& c : children) {
      if (c.error_pipe.valid()) {
        fds.push_back({c.error_pipe.get(), POLLIN, 0});
        owners.push_back(&c);
      }
    }
    // A pipe's end of stream is the child's exit; the cap covers a grandchild holding it.
    int rc = ::poll(fds.data(), fds.size(), fds.empty() ? 20 : 100);
    if (rc < 0 && errno != EINTR) throw_errno("spawn: poll", errno);
    for (size_t i = 0; rc > 0 && i < fds.size(); ++i) {
      if (fds[i].revents && !drain(*owners[i])) owners[i]->error_pipe.reset();
    }
  }
}

}  // namespace cohort
