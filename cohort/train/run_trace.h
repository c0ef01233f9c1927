// The trace of a training run (`cohort train --trace FILE`): each rank
// records into its own Tracer (pid = its rank), and at the end the ranks'
// events travel to rank 0 over the job's process group, which writes one
// Chrome/Perfetto trace with every rank in it. Merging over the group, not
// through files, works across hosts without a shared file system.
//
// A run that fails writes what each rank has to FILE.rank<R>.json instead
// (the group may be broken), so a crash still leaves its trace behind.
//
// Errors: IoError naming the path; the group's errors for the gather.
#pragma once

#include <string>

#include "cohort/base/trace.h"
#include "cohort/distributed/process_group.h"

namespace cohort::train {

// Collective over world when it is non-null (every rank calls); rank 0 (or
// the only process) writes path.
void write_run_trace(const Tracer& tracer, distributed::ProcessGroup* world,
                     const std::string& path);

// FILE.rank<R>.json: where a failed run's rank R leaves its own events.
std::string trace_part_path(const std::string& path, int rank);

}  // namespace cohort::train
