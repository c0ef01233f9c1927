#include "cohort/launch/child_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cohort/base/error.h"

extern char** environ;

namespace cohort::launch {

std::string ExitStatus::describe() const {
  if (signal != 0) {
    const char* abbrev = ::sigabbrev_np(signal);
    return fmt::format("was killed by signal {} (SIG{})", signal, abbrev ? abbrev : "?");
  }
  return fmt::format("exited with code {}", code);
}

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    s.code = WEXITSTATUS(status);
  }
  return s;
}

std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : overrides) replaced = replaced || k == name;
    if (!replaced) out.push_back(std::move(entry));
  }
  for (const auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

namespace {

// Finds the program like execvp would, but before fork (exec in the child
// then needs no allocation or PATH walk).
std::string resolve_program(const std::string& name, const std::vector<std::string>& env) {
  COHORT_CHECK(!name.empty(), "launch: empty program name");
  if (name.find('/') != std::string::npos) return name;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& e : env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t colon = path.find(':', pos);
    std::string dir =
        path.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    pos = colon == std::string::npos ? path.size() + 1 : colon + 1;
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  throw IoError(fmt::format("launch: cannot find program '{}' on PATH ({})", name, path));
}

struct Pipe {
  UniqueFd read, write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("launch: pipe", errno);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Child-side set-up shared by exec and fork_call. Only async-signal-safe calls.
void setup_child(pid_t parent, const ChildSpec& spec, const cpu_set_t* cpus, int out_fd,
                 int err_fd) {
  ::setpgid(0, 0);
  if (spec.die_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(126);  // the parent died before prctl took hold
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (spec.null_stdin) {
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      if (devnull != 0) ::close(devnull);
    }
  }
  if (out_fd >= 0) ::dup2(out_fd, 1);
  if (err_fd >= 0) ::dup2(err_fd, 2);
  if (cpus) ::sched_setaffinity(0, sizeof(cpu_set_t), cpus);
}

cpu_set_t make_cpu_set(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    COHORT_CHECK(c >= 0 && c < CPU_SETSIZE, "launch: CPU {} out of range [0, {})", c, CPU_SETSIZE);
    CPU_SET(c, &set);
  }
  return set;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

ChildProcess ChildProcess::exec(const ChildSpec& spec) {
  COHORT_CHECK(!spec.argv.empty(), "launch: no program given");
  std::string path = resolve_program(spec.argv[0], spec.env);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  cpu_set_t cpus = make_cpu_set(spec.cpus);
  Pipe out, err;
  if (spec.capture_output) {
    out = make_pipe();
    err = make_pipe();
  }
  Pipe status = make_pipe();  // closed by a successful exec (O_CLOEXEC)
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw_errno("launch: fork", errno);
  if (pid == 0) {
    setup_child(parent, spec, spec.cpus.empty() ? nullptr : &cpus, out.write.get(),
                err.write.get());
    ::execve(path.c_str(), argv.data(), envp.data());
    int e = errno;
    [[maybe_unused]] ssize_t w = ::write(status.write.get(), &e, sizeof(e));
    ::_exit(127);
  }
  ChildProcess child;
  child.pid_ = pid;
  ::setpgid(pid, pid);  // also from here, so signals reach the group at once
  status.write.reset();
  out.write.reset();
  err.write.reset();
  int exec_errno = 0;
  ssize_t r;
  do {
    r = ::read(status.read.get(), &exec_errno, sizeof(exec_errno));
  } while (r < 0 && errno == EINTR);
  if (r > 0) {
    child.kill_and_reap();
    throw IoError(errno_message(fmt::format("launch: cannot execute '{}'", path), exec_errno));
  }
  if (spec.capture_output) {
    set_nonblocking(out.read.get());
    set_nonblocking(err.read.get());
    child.out_ = std::move(out.read);
    child.err_ = std::move(err.read);
  }
  return child;
}

ChildProcess ChildProcess::fork_call(const ChildSpec& spec, const std::function<int()>& body) {
  cpu_set_t cpus = make_cpu_set(spec.cpus);
  Pipe out, err;
  if (spec.capture_output) {
    out = make_pipe();
    err = make_pipe();
  }
  std::fflush(nullptr);  // or buffered output would be written twice
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw_errno("launch: fork", errno);
  if (pid == 0) {
    setup_child(parent, spec, spec.cpus.empty() ? nullptr : &cpus, out.write.get(),
                err.write.get());
    int code = 1;
    try {
      code = body();
    } catch (...) {
      code = 1;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  ChildProcess child;
  child.pid_ = pid;
  ::setpgid(pid, pid);
  if (spec.capture_output) {
    set_nonblocking(out.read.get());
    set_nonblocking(err.read.get());
    child.out_ = std::move(out.read);
    child.err_ = std::move(err.read);
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      status_(std::exchange(other.status_, std::nullopt)),
      out_(std::move(other.out_)),
      err_(std::move(other.err_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_) kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
    out_ = std::move(other.out_);
    err_ = std::move(other.err_);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) kill_and_reap();
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &st, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) status_ = ExitStatus::from_wait_status(st);
  if (r < 0 && errno == ECHILD) status_ = ExitStatus{0, 0};  // reaped elsewhere: unknown
  return status_;
}

void ChildProcess::signal(int sig) {
  if (pid_ <= 0 || poll()) return;
  if (::kill(-pid_, sig) != 0) ::kill(pid_, sig);
}

void ChildProcess::kill_and_reap() {
  if (pid_ <= 0 || status_) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &st, 0);
  } while (r < 0 && errno == EINTR);
  status_ = r == pid_ ? ExitStatus::from_wait_status(st) : ExitStatus{0, SIGKILL};
}

}  // namespace cohort::launch
