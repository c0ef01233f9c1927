// cohort: the command-line tool. Subcommands register themselves (command.h).
#include <cstdio>
#include <cstdlib>
#include <map>

#include "cohort/base/cpu.h"
#include "cohort/base/error.h"
#include "tools/cohort/command.h"

namespace cohort::cli {
std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}
const rendezvous::EnvSettings& env_settings() {
  static const rendezvous::EnvSettings settings = rendezvous::read_env_settings();
  return settings;
}
}  // namespace cohort::cli

// A test build of the CLI may define this to set the process up before any
// command runs (tests/train/fake_gpu_cli.cc: a fake GPU); the cohort
// executable does not define it.
extern "C" void cohort_cli_before_main() __attribute__((weak));

int main(int argc, char** argv) {
  if (cohort_cli_before_main != nullptr) cohort_cli_before_main();
  CLI::App app{"cohort: distributed deep-learning training in C++"};
  app.require_subcommand(1);
  // A bad flag or value prints the chosen subcommand's usage with the error.
  app.failure_message(CLI::FailureMessage::help);
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& c : cohort::cli::commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    // The CLI is the edge that reads COHORT_KERNELS and the process settings
    // (workers started by `cohort run` inherit them): checked before any work
    // or worker starts, so a path this CPU lacks or a malformed value fails
    // at once with the reason.
    if (const char* kernels = std::getenv("COHORT_KERNELS"))
      cohort::apply_kernel_path_setting(kernels, "COHORT_KERNELS");
    cohort::rendezvous::apply_env_settings(cohort::cli::env_settings());
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohort: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
