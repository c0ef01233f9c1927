// ShardedDataParallel::local_chunk (sharded_data_parallel.h): where this
// rank's chunk of a parameter is kept, for sharded checkpoints.
#include "cohort/parallel/zero/sharded_data_parallel.h"

namespace cohort::parallel {

Tensor ShardedDataParallel::local_chunk(const Tensor& param) const {
  for (const Param& p : params_) {
    if (!p.tensor.is_same(param)) continue;
    const Unit& u = units_[p.unit];
    return options_.stage == 3 ? u.layout.piece_of_segment(u.shard, p.slot, rank_)
                               : u.layout.piece_of_tensor(p.tensor, p.slot, rank_);
  }
  throw InvalidArgument(
      fmt::format("ShardedDataParallel::local_chunk: a {} {} tensor is not a parameter of the "
                  "wrapped {}",
                  dtype_name(param.dtype()), shape_str(param.sizes()), module_->type_name()));
}

}  // namespace cohort::parallel
