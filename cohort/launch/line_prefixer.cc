#include "cohort/launch/line_prefixer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace cohort::launch {

LinePrefixer::LinePrefixer(std::string prefix, std::function<void(std::string_view)> sink)
    : prefix_(std::move(prefix)), sink_(std::move(sink)) {}

void LinePrefixer::feed(std::string_view data) {
  std::string out;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    if (nl == std::string_view::npos) {
      held_.append(data.substr(pos));
      if (held_.size() >= kMaxHeld) {
        out += prefix_ + held_ + "\n";
        held_.clear();
      }
      break;
    }
    out += prefix_;
    out += held_;
    held_.clear();
    out.append(data.substr(pos, nl + 1 - pos));
    pos = nl + 1;
  }
  if (!out.empty()) sink_(out);
}

void LinePrefixer::finish() {
  if (held_.empty()) return;
  std::string out = prefix_ + held_ + "\n";
  held_.clear();
  sink_(out);
}

std::function<void(std::string_view)> fd_sink(int fd) {
  return [fd](std::string_view text) {
    const char* p = text.data();
    size_t n = text.size();
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w > 0) {
        p += w;
        n -= static_cast<size_t>(w);
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else if (w < 0 && errno == EAGAIN) {
        pollfd pf{fd, POLLOUT, 0};
        ::poll(&pf, 1, 1000);
      } else {
        return;
      }
    }
  };
}

}  // namespace cohort::launch
