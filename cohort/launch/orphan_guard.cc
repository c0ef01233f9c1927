#include "cohort/launch/orphan_guard.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "cohort/base/error.h"

namespace cohort::launch {
namespace {

// Messages, one int32 each (SOCK_SEQPACKET keeps them whole): a positive
// process group id is watched, a negative one forgotten, 0 is the goodbye.
constexpr int32_t kGoodbye = 0;

// The guard's whole life. It runs in a fork of the launcher, so only
// async-signal-safe calls and no allocation.
int guard_main(int fd, int launcher_end) {
  ::prctl(PR_SET_NAME, "cohort-guard");
  ::close(launcher_end);  // or the hang-up would never come
  // Nothing of the launcher's stays open here (a harness reading its output
  // to the end, a listening socket): only the socket, as fd 3.
  if (fd != 3) {
    ::dup2(fd, 3);
    fd = 3;
  }
  ::close_range(4, ~0U, 0);
  int devnull = ::open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    if (devnull > 3) ::close(devnull);
  }
  pid_t groups[OrphanGuard::kMaxGroups];
  int n = 0;
  while (true) {
    int32_t m = 0;
    ssize_t r = ::recv(fd, &m, sizeof(m), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r != static_cast<ssize_t>(sizeof(m))) break;  // hang-up: the launcher is gone
    if (m == kGoodbye) return 0;
    if (m > 0) {
      if (n < OrphanGuard::kMaxGroups) groups[n++] = m;
      continue;
    }
    for (int i = 0; i < n; ++i) {
      if (groups[i] == -m) {
        groups[i] = groups[--n];
        break;
      }
    }
  }
  for (int i = 0; i < n; ++i) ::kill(-groups[i], SIGKILL);
  return 0;
}

}  // namespace

OrphanGuard::OrphanGuard() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    throw_errno("cohort run: socketpair for the orphan guard", errno);
  socket_ = UniqueFd(fds[0]);
  UniqueFd theirs(fds[1]);
  ChildSpec spec;
  spec.die_with_parent = false;  // it must outlive a killed launcher, if only briefly
  const int their_fd = theirs.get(), our_fd = socket_.get();
  guard_ =
      ChildProcess::fork_call(spec, [their_fd, our_fd] { return guard_main(their_fd, our_fd); });
}

OrphanGuard::~OrphanGuard() {
  send(kGoodbye);
  socket_.reset();
  // It leaves at the goodbye or the hang-up; the ChildProcess destructor
  // kills one that has not within a second, and reaps it.
  for (int i = 0; i < 100 && guard_.running(); ++i) ::poll(nullptr, 0, 10);
}

void OrphanGuard::watch(pid_t pgid) {
  if (pgid > 0) send(static_cast<int32_t>(pgid));
}

void OrphanGuard::forget(pid_t pgid) {
  if (pgid > 0) send(-static_cast<int32_t>(pgid));
}

void OrphanGuard::send(int32_t message) {
  if (!socket_.valid()) return;
  for (int tries = 0; tries < 2; ++tries) {
    ssize_t r = ::send(socket_.get(), &message, sizeof(message), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r == static_cast<ssize_t>(sizeof(message))) return;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{socket_.get(), POLLOUT, 0};
      ::poll(&p, 1, 100);  // the guard reads at once; only a stuck one makes us wait
      continue;
    }
    break;  // the guard is gone: go on without it
  }
}

}  // namespace cohort::launch
