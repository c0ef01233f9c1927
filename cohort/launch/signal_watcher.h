// SignalWatcher: receives chosen signals through a signalfd instead of
// handlers, so a poll loop sees them as readable data. Blocks the signals in
// the calling thread for its lifetime (threads started afterwards inherit the
// block) and restores the previous mask on destruction, after draining what
// arrived. Child processes get an empty mask (ChildProcess resets it).
//
// Thread safety: none; create and use on the thread that polls.
#pragma once

#include <signal.h>

#include <initializer_list>
#include <vector>

#include "cohort/base/unique_fd.h"

namespace cohort::launch {

class SignalWatcher {
 public:
  explicit SignalWatcher(std::initializer_list<int> signals);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Readable (POLLIN) when a signal is pending.
  int fd() const { return fd_.get(); }
  // The signals received since the last call (never blocks).
  std::vector<int> take();

 private:
  sigset_t old_mask_;
  UniqueFd fd_;
};

}  // namespace cohort::launch
