#include "cohort/launch/child_process.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "cohort/base/error.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

ExitStatus wait_for(ChildProcess& c) {
  for (int i = 0; i < 3000; ++i) {  // bounded: 30 s
    if (auto s = c.poll()) return *s;
    std::this_thread::sleep_for(10ms);
  }
  ADD_FAILURE() << "child did not end";
  c.kill_and_reap();
  return *c.poll();
}

std::string read_all(int fd) {
  std::string out;
  char buf[256];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) break;
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

TEST(ChildProcess, ExecCapturesOutputAndExitCode) {
  ChildSpec spec;
  spec.argv = {"sh", "-c", "echo out-$FOO; echo err >&2; exit 7"};
  spec.env = environment_with({{"FOO", "bar"}});
  spec.capture_output = true;
  ChildProcess c = ChildProcess::exec(spec);
  EXPECT_EQ(read_all(c.stdout_fd()), "out-bar\n");
  EXPECT_EQ(read_all(c.stderr_fd()), "err\n");
  ExitStatus s = wait_for(c);
  EXPECT_EQ(s.code, 7);
  EXPECT_FALSE(s.success());
  EXPECT_EQ(s.describe(), "exited with code 7");
}

TEST(ChildProcess, MissingProgramThrows) {
  ChildSpec spec;
  spec.argv = {"/no/such/program"};
  spec.env = environment_with({});
  EXPECT_THROW(ChildProcess::exec(spec), IoError);
  spec.argv = {"no-such-program-on-path-xyz"};
  EXPECT_THROW(ChildProcess::exec(spec), IoError);
}

TEST(ChildProcess, SignalReachesTheWholeGroup) {
  ChildSpec spec;
  // The shell's child sleeps; signalling the group stops both.
  spec.argv = {"sh", "-c", "sleep 100 & wait"};
  spec.env = environment_with({});
  ChildProcess c = ChildProcess::exec(spec);
  std::this_thread::sleep_for(50ms);
  c.signal(SIGTERM);
  ExitStatus s = wait_for(c);
  EXPECT_EQ(s.signal, SIGTERM);
  EXPECT_NE(s.describe().find("SIGTERM"), std::string::npos);
}

TEST(ChildProcess, DestructorKillsRunningChild) {
  pid_t pid;
  {
    ChildSpec spec;
    spec.argv = {"sleep", "100"};
    spec.env = environment_with({});
    ChildProcess c = ChildProcess::exec(spec);
    pid = c.pid();
  }
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: the pid no longer names our child
}

TEST(ChildProcess, ForkCallRunsBodyPinned) {
  ChildSpec spec;
  spec.cpus = {0};
  spec.capture_output = true;
  ChildProcess c = ChildProcess::fork_call(spec, [] {
    cpu_set_t set;
    sched_getaffinity(0, sizeof(set), &set);
    std::printf("cpus=%d\n", CPU_COUNT(&set));
    return 5;
  });
  EXPECT_EQ(read_all(c.stdout_fd()), "cpus=1\n");
  EXPECT_EQ(wait_for(c).code, 5);
}

}  // namespace
}  // namespace cohort::launch
