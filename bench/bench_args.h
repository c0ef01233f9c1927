// The command lines of the benchmark programs: "--name value" options and
// bare "--name" switches, read in one loop the same way by every program,
// with the program's usage line on any error and exit status 2 (a bad
// command line is no benchmark result):
//
//   bench::Args args(argc, argv, "bench_x [--steps N] [--fast]");
//   while (args.next()) {
//     if (args.is("--steps")) steps = args.integer();
//     else if (args.is("--fast")) fast = true;
//     else args.unknown();
//   }
//
// Header only. Thread safety: main's thread; fail() ends the process.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace cohort::bench {

class Args {
 public:
  // usage: the program's name, then its flags ("bench_x [--steps N] ...").
  Args(int argc, char** argv, std::string usage)
      : argc_(argc), argv_(argv), usage_(std::move(usage)) {}

  // Moves to the next flag; false after the last argument.
  bool next() {
    if (next_ >= argc_) return false;
    flag_ = argv_[next_++];
    return true;
  }
  const std::string& flag() const { return flag_; }
  bool is(std::string_view name) const { return flag_ == name; }

  // The current flag's value: the argument after it.
  std::string value() {
    if (next_ >= argc_) fail(flag_ + " needs a value");
    return argv_[next_++];
  }
  int64_t integer() { return number<int64_t>("an integer"); }
  double real() { return number<double>("a number"); }

  // Prints "<program>: <why>" and the usage line; exits 2.
  [[noreturn]] void fail(const std::string& why) const {
    const std::string program = usage_.substr(0, usage_.find(' '));
    std::fprintf(stderr, "%s: %s\nusage: %s\n", program.c_str(), why.c_str(), usage_.c_str());
    std::exit(2);
  }
  [[noreturn]] void unknown() const { fail("unknown option " + flag_); }

 private:
  template <typename T>
  T number(const char* what) {
    const std::string v = value();
    T out{};
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || end != v.data() + v.size())
      fail(flag_ + " " + v + ": expected " + what);
    return out;
  }

  int argc_;
  char** argv_;
  std::string usage_;
  int next_ = 1;
  std::string flag_;
};

// The flags of a benchmark that times training steps: --batch B (examples
// per step and rank), --steps N (timed one by one), --warmup N (run first,
// not timed), --threads N (intra-op threads). Defaults are the program's.
struct StepFlags {
  int64_t batch = 8;
  int steps = 5;
  int warmup = 2;
  int threads = 1;

  // Reads the current flag of args when it is one of these; false otherwise.
  bool read(Args& args) {
    if (args.is("--batch")) {
      batch = args.integer();
    } else if (args.is("--steps")) {
      steps = static_cast<int>(args.integer());
    } else if (args.is("--warmup")) {
      warmup = static_cast<int>(args.integer());
    } else if (args.is("--threads")) {
      threads = static_cast<int>(args.integer());
    } else {
      return false;
    }
    return true;
  }
};

}  // namespace cohort::bench
