#include "cohort/launch/signal_watcher.h"

#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

#include "cohort/base/error.h"

namespace cohort::launch {

SignalWatcher::SignalWatcher(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  if (int rc = ::pthread_sigmask(SIG_BLOCK, &set, &old_mask_); rc != 0) {
    throw_errno("SignalWatcher: pthread_sigmask", rc);
  }
  int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    throw_errno("SignalWatcher: signalfd", e);
  }
  fd_.reset(fd);
}

SignalWatcher::~SignalWatcher() {
  take();
  fd_.reset();
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

std::vector<int> SignalWatcher::take() {
  std::vector<int> out;
  signalfd_siginfo info;
  while (true) {
    ssize_t r = ::read(fd_.get(), &info, sizeof(info));
    if (r == static_cast<ssize_t>(sizeof(info))) {
      out.push_back(static_cast<int>(info.ssi_signo));
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    break;
  }
  return out;
}

}  // namespace cohort::launch
