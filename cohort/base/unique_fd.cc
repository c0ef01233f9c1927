#include "cohort/base/unique_fd.h"

#include <unistd.h>

namespace cohort {

void UniqueFd::reset(int fd) {
  // close(2) is not retried on EINTR: on Linux the descriptor is gone either way.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace cohort
