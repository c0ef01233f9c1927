#include "cohort/parallel/tensor_parallel/mappings.h"

#include <utility>
#include <vector>

#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/error.h"

namespace cohort::parallel {

namespace {

using distributed::ProcessGroup;

void check_group(const std::shared_ptr<ProcessGroup>& tp, const char* op) {
  COHORT_CHECK(tp != nullptr, "{}: the tensor-parallel group is null", op);
}

// A sum over the group of a private copy of x (the caller's tensor, possibly
// a gradient shared with other nodes, is never written).
Tensor all_reduce_copy(const Tensor& x, ProcessGroup& tp) {
  Tensor out = x.clone();
  if (tp.size() > 1) tp.all_reduce(out, {});
  return out;
}

// Own slice of the last dim, after checking that it splits evenly.
Tensor own_last_dim_slice(const Tensor& x, const ProcessGroup& tp, const char* op) {
  COHORT_CHECK(x.dim() >= 1, "{} (rank {} of group {}): needs at least 1 dim, got a 0-d tensor", op,
               tp.rank(), tp.name());
  const int64_t n = x.size(-1);
  COHORT_CHECK(n % tp.size() == 0,
               "{} (rank {} of group {}): the last dim {} is not divisible by the group size {}",
               op, tp.rank(), tp.name(), n, tp.size());
  return shard_along_dim(x, -1, tp.rank(), tp.size());
}

}  // namespace

Tensor all_gather_along_dim(const Tensor& x, int64_t dim, ProcessGroup& tp, int64_t blocks) {
  dim = wrap_dim(dim, x.dim(), "all_gather_along_dim");
  if (blocks != 1) {
    COHORT_CHECK(blocks > 1 && x.size(dim) % blocks == 0,
                 "all_gather_along_dim (rank {}): size {} of dim {} is not {} equal blocks",
                 tp.rank(), x.size(dim), dim, blocks);
    // [.., p * (k blocks of s/k), ..] rank-major -> k blocks of [p pieces].
    Tensor all = all_gather_along_dim(x, dim, tp);
    const int64_t piece = x.size(dim) / blocks;
    std::vector<Tensor> parts;
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t r = 0; r < tp.size(); ++r)
        parts.push_back(all.narrow(dim, r * x.size(dim) + b * piece, piece));
    return cat(parts, dim);
  }
  const int64_t p = tp.size();
  Shape full = x.sizes();
  full[dim] *= p;
  if (p == 1) return x.clone();
  Tensor in = x.contiguous();
  Tensor flat = Tensor::empty({p * x.numel()}, x.dtype(), x.device());
  tp.all_gather_into_tensor(flat, in, {});
  // flat is [p, A, s, B] (rank-major); the result wants [A, p, s, B].
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < dim; ++i) a *= x.size(i);
  for (int64_t i = dim + 1; i < x.dim(); ++i) b *= x.size(i);
  return flat.view({p, a, x.size(dim), b}).permute({1, 0, 2, 3}).contiguous().view(full);
}

Tensor shard_along_dim(const Tensor& x, int64_t dim, int rank, int parts, int64_t blocks) {
  dim = wrap_dim(dim, x.dim(), "shard_along_dim");
  COHORT_CHECK(parts > 0 && rank >= 0 && rank < parts,
               "shard_along_dim: rank {} out of range for {} parts", rank, parts);
  const int64_t n = x.size(dim);
  if (blocks != 1) {
    COHORT_CHECK(blocks > 1 && n % (blocks * parts) == 0,
                 "shard_along_dim: size {} of dim {} is not {} blocks of {} equal parts", n, dim,
                 blocks, parts);
    const int64_t block = n / blocks, k = block / parts;
    std::vector<Tensor> pieces;
    for (int64_t b = 0; b < blocks; ++b) pieces.push_back(x.narrow(dim, b * block + rank * k, k));
    return cat(pieces, dim).contiguous();
  }
  COHORT_CHECK(n % parts == 0, "shard_along_dim: size {} of dim {} is not divisible by {} parts", n,
               dim, parts);
  const int64_t k = n / parts;
  return x.narrow(dim, rank * k, k).clone();
}

Tensor reduce_scatter_along_dim(const Tensor& x, int64_t dim, ProcessGroup& tp) {
  dim = wrap_dim(dim, x.dim(), "reduce_scatter_along_dim");
  const int64_t p = tp.size(), n = x.size(dim);
  COHORT_CHECK(n % p == 0,
               "reduce_scatter_along_dim (rank {} of group {}): size {} of dim {} is not divisible "
               "by the group size {}",
               tp.rank(), tp.name(), n, dim, p);
  if (p == 1) return x.clone();
  // dim first, so that each rank's piece is one contiguous block.
  Tensor in = x.transpose(0, dim).contiguous();
  Shape s = in.sizes();
  s[0] /= p;
  Tensor out = Tensor::empty(s, x.dtype(), x.device());
  tp.reduce_scatter_tensor(out, in, {});
  return out.transpose(0, dim).contiguous();
}

Tensor gather_from_sequence_parallel_region(const Tensor& x,
                                            const std::shared_ptr<ProcessGroup>& tp) {
  check_group(tp, "gather_from_sequence_parallel_region");
  COHORT_CHECK(x.dim() >= 2,
               "gather_from_sequence_parallel_region (rank {}): needs [B, T, ...], got {}",
               tp->rank(), shape_str(x.sizes()));
  Tensor out = all_gather_along_dim(x, 1, *tp);
  return autograd::record(out, "GatherFromSequenceParallelRegion", {x},
                          [tp](const Tensor& g, const std::vector<bool>&) {
                            return std::vector<Tensor>{reduce_scatter_along_dim(g, 1, *tp)};
                          });
}

Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x,
                                                  const std::shared_ptr<ProcessGroup>& tp) {
  check_group(tp, "reduce_scatter_to_sequence_parallel_region");
  COHORT_CHECK(x.dim() >= 2,
               "reduce_scatter_to_sequence_parallel_region (rank {}): needs [B, T, ...], got {}",
               tp->rank(), shape_str(x.sizes()));
  Tensor out = reduce_scatter_along_dim(x, 1, *tp);
  return autograd::record(out, "ReduceScatterToSequenceParallelRegion", {x},
                          [tp](const Tensor& g, const std::vector<bool>&) {
                            return std::vector<Tensor>{all_gather_along_dim(g, 1, *tp)};
                          });
}

Tensor copy_to_tensor_parallel_region(const Tensor& x, const std::shared_ptr<ProcessGroup>& tp) {
  check_group(tp, "copy_to_tensor_parallel_region");
  // A new handle on the same data, so that the node is this op's, not x's.
  Tensor out = x.detach();
  return autograd::record(out, "CopyToTensorParallelRegion", {x},
                          [tp](const Tensor& g, const std::vector<bool>&) {
                            return std::vector<Tensor>{all_reduce_copy(g, *tp)};
                          });
}

Tensor reduce_from_tensor_parallel_region(const Tensor& x,
                                          const std::shared_ptr<ProcessGroup>& tp) {
  check_group(tp, "reduce_from_tensor_parallel_region");
  Tensor out = all_reduce_copy(x, *tp);
  return autograd::record(
      out, "ReduceFromTensorParallelRegion", {x},
      [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; });
}

Tensor gather_from_tensor_parallel_region(const Tensor& x,
                                          const std::shared_ptr<ProcessGroup>& tp) {
  check_group(tp, "gather_from_tensor_parallel_region");
  COHORT_CHECK(x.dim() >= 1,
               "gather_from_tensor_parallel_region (rank {} of group {}): needs at least 1 dim, "
               "got a 0-d tensor",
               tp->rank(), tp->name());
  Tensor out = all_gather_along_dim(x, -1, *tp);
  return autograd::record(
      out, "GatherFromTensorParallelRegion", {x}, [tp](const Tensor& g, const std::vector<bool>&) {
        return std::vector<Tensor>{shard_along_dim(g, -1, tp->rank(), tp->size())};
      });
}

Tensor scatter_to_tensor_parallel_region(const Tensor& x, const std::shared_ptr<ProcessGroup>& tp) {
  check_group(tp, "scatter_to_tensor_parallel_region");
  Tensor out = own_last_dim_slice(x, *tp, "scatter_to_tensor_parallel_region");
  return autograd::record(out, "ScatterToTensorParallelRegion", {x},
                          [tp](const Tensor& g, const std::vector<bool>&) {
                            return std::vector<Tensor>{all_gather_along_dim(g, -1, *tp)};
                          });
}

}  // namespace cohort::parallel
