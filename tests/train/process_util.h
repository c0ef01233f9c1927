// Helpers of the `cohort train` end-to-end tests: run a command to its end
// with its output captured, or start it in the background and find, signal
// and wait for it and its workers. Every wait has a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace cohort::test {

struct Finished {
  int exit_code = -1;  // 128 + signal when killed; -1 when it ran past the deadline (then killed)
  std::string output;  // stdout and stderr interleaved
};

// Runs argv (argv[0] a path) with extra environment entries "K=V"; kills it
// after `timeout`.
Finished run_command(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                     std::chrono::seconds timeout = std::chrono::seconds(240));

// A command running in the background with its output going to a file.
class Background {
 public:
  explicit Background(const std::vector<std::string>& argv,
                      const std::vector<std::string>& env = {});
  ~Background();  // kills the process group if still running
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  pid_t pid() const { return pid_; }
  // Waits up to `timeout`; -1 when still running then. Once it ended, the
  // same exit code every time.
  int wait(std::chrono::milliseconds timeout);
  std::string output() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
  std::string out_path_;
};

// The child process of `parent` whose environment has RANK=<rank>, or -1.
pid_t find_worker(pid_t parent, int rank);

// A fresh empty directory under the test temp dir.
std::string make_temp_dir(const std::string& tag);

std::string read_file(const std::string& path);

}  // namespace cohort::test
