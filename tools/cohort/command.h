// Subcommand registry of the `cohort` CLI. Each subcommand lives in its own
// file and registers itself with a static CommandRegistrar, so adding one
// needs no edit elsewhere. A command's run function returns the exit code and
// may throw cohort::Error (printed by main, exit code 1).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "cohort/rendezvous/env_bootstrap.h"

namespace cohort::cli {

// The process settings of the environment (COHORT_LOG_LEVEL,
// COHORT_NUM_THREADS, COHORT_STORAGE_CACHE), read and checked once: the CLI
// is an edge (docs/configuration.md). main applies them before any command
// runs; commands look here rather than at the environment (e.g. whether
// COHORT_NUM_THREADS was given).
const rendezvous::EnvSettings& env_settings();

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
