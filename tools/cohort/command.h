// Subcommand registry of the `cohort` CLI. Each subcommand lives in its own
// file and registers itself with a static CommandRegistrar, so adding one
// needs no edit elsewhere. A command's run function returns the exit code and
// may throw cohort::Error (printed by main, exit code 1).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace cohort::cli {

struct Command {
  std::string name;
  std::string help;
  // Adds the command's options to `app` and returns the function to run when
  // the command was chosen.
  std::function<std::function<int()>(CLI::App& app)> setup;
};

std::vector<Command>& commands();

struct CommandRegistrar {
  explicit CommandRegistrar(Command c) { commands().push_back(std::move(c)); }
};

}  // namespace cohort::cli
