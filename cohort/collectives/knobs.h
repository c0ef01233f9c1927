// The collectives' environment knobs, as data: which variables the options of
// a communicator may come from, and how their text becomes option fields.
// This layer never reads the environment itself (docs/design.md, rule 11):
// the edge (the env:// bootstrap, rendezvous/env_bootstrap.h, or a program's
// main) reads the variables named by knob_names() once and hands their values
// to apply_knobs, which validates them.
//
//   COHORT_TRANSPORT    auto | tcp | shm: the transport when the options say kAuto
//   COHORT_SPIN_US      microseconds a waiting op spins before it sleeps (>= 0)
//   COHORT_<OP>_ALGO    a forced algorithm per op (op_table.h, OpInfo::algo_env),
//                       e.g. COHORT_ALLREDUCE_ALGO=ring|direct|pull
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cohort/collectives/communicator.h"

namespace cohort::collectives {

// Every variable apply_knobs understands.
std::vector<std::string> knob_names();

// Applies the knobs in `env` (variable -> value; unset or empty ones absent)
// to `transport` (only when it is kAuto: an explicit option wins) and
// `tuning`. Throws InvalidArgument "<VAR>=<value>: expected ..." for a value
// it cannot use; nothing is changed then.
void apply_knobs(const std::map<std::string, std::string>& env, TransportKind& transport,
                 CollectiveTuning& tuning);

}  // namespace cohort::collectives
