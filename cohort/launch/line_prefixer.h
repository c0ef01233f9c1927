// LinePrefixer: turns a worker's raw output stream into whole lines, each
// written with a prefix such as "[rank 3] ", so lines of different workers
// never interleave mid-line. Text without a newline is held until the newline
// comes, the held text exceeds kMaxHeld (then it is written as its own line),
// or finish() is called at end of stream.
//
// Thread safety: none; one per stream.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace cohort::launch {

class LinePrefixer {
 public:
  static constexpr size_t kMaxHeld = 64 * 1024;
  // sink receives whole prefixed lines, newline included, one call per line batch.
  LinePrefixer(std::string prefix, std::function<void(std::string_view)> sink);

  void feed(std::string_view data);
  // Writes any held partial line (with a newline added).
  void finish();

 private:
  std::string prefix_;
  std::function<void(std::string_view)> sink_;
  std::string held_;
};

// A sink writing to fd whole, retrying EINTR and short writes; errors (a closed
// terminal) are ignored so a launcher never dies of its output.
std::function<void(std::string_view)> fd_sink(int fd);

}  // namespace cohort::launch
