// Moving whole TensorDicts between the ranks of a group: what the
// model-parallel strategies use to put a checkpoint's optimizer state
// together on rank 0 from the parts each rank holds. Names, dtypes and
// shapes travel with the data, so the dicts may differ from rank to rank.
//
// Collective over `pg` (every rank calls, in the same order as its other
// ops on pg); blocking; failures are the group's (peer lost, timeout).
#pragma once

#include <vector>

#include "cohort/core/tensor_dict.h"
#include "cohort/distributed/process_group.h"

namespace cohort::train {

// On root: every rank's dict by group rank (root's own included, not copied);
// elsewhere: empty.
std::vector<TensorDict> gather_tensor_dicts(distributed::ProcessGroup& pg, const TensorDict& dict,
                                            int root = 0);

}  // namespace cohort::train
