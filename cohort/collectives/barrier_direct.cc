#include "cohort/collectives/barrier_direct.h"

#include "cohort/collectives/engine.h"

namespace cohort::collectives {

BarrierDirect::BarrierDirect(Communicator& comm) : comm_(comm) {}

void BarrierDirect::run(Duration timeout) {
  Engine e(comm_, {OpKind::kBarrier, DataType::kUInt8, ReduceOp::kSum, Algo::kDirect, -1, 0},
           timeout);
  for (int p = 0; p < e.size(); ++p) {
    if (p == e.rank()) continue;
    e.send(p);
    e.recv(p);
  }
  e.run();
}

}  // namespace cohort::collectives
