// Compiled, not run, by the distributed.work.* tests (tests/distributed/
// CMakeLists.txt): as in PyTorch, a plain call blocks and its result may be
// dropped; the Work of an async call is [[nodiscard]], so dropping it (and
// with it the only way to learn the op's outcome) is a compile-time warning.
#include "cohort/distributed/process_group.h"

namespace cd = cohort::distributed;

void blocking_calls(cd::ProcessGroup& pg, float* v) {
  pg.barrier();
  pg.all_reduce(v, 1, cd::DataType::kFloat32);
  cd::Work w = pg.all_reduce(v, 1, cd::DataType::kFloat32, {}, cd::async_op);
  w.wait();
}

#ifdef COHORT_DROP_ASYNC_WORK
void dropped_async_work(cd::ProcessGroup& pg) { pg.barrier({}, cd::async_op); }
#endif
