#include "tests/train/process_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace cohort::test {
namespace {

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const std::string& out_path) {
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    for (const auto& kv : env) putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string make_temp_dir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base != nullptr ? base : "/tmp") + "/cohort_train_" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return std::string(buf.data());
}

Background::Background(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  out_path_ = make_temp_dir("out") + "/output.txt";
  pid_ = spawn(argv, env, out_path_);
}

Background::~Background() {
  if (!reaped_ && pid_ > 0) {
    kill(-pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

int Background::wait(std::chrono::milliseconds timeout) {
  if (reaped_) return exit_code_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      exit_code_ = decode(status);
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string Background::output() const { return read_file(out_path_); }

Finished run_command(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     std::chrono::seconds timeout) {
  Finished f;
  Background bg(argv, env);
  f.exit_code = bg.wait(timeout);
  f.output = bg.output();
  return f;
}

pid_t find_worker(pid_t parent, int rank) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return -1;
  pid_t found = -1;
  const std::string want = "RANK=" + std::to_string(rank);
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    std::string stat = read_file("/proc/" + std::string(e->d_name) + "/stat");
    // pid (comm) state ppid ...
    size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 2));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::string environ = read_file("/proc/" + std::string(e->d_name) + "/environ");
    size_t pos = 0;
    while (pos < environ.size()) {
      size_t nul = environ.find('\0', pos);
      if (nul == std::string::npos) nul = environ.size();
      if (environ.compare(pos, nul - pos, want) == 0) found = static_cast<pid_t>(pid);
      pos = nul + 1;
    }
    if (found > 0) break;
  }
  closedir(d);
  return found;
}

}  // namespace cohort::test
