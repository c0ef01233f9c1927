#include "cohort/nn/embedding.h"

#include "cohort/autograd/grad_mode.h"
#include "cohort/nn/init.h"

namespace cohort::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen,
                     std::optional<int64_t> padding_idx)
    : Cloneable("Embedding"), num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  COHORT_CHECK(num_embeddings > 0 && embedding_dim > 0,
               "Embedding: sizes must be positive, got {} x {}", num_embeddings, embedding_dim);
  if (padding_idx) {
    int64_t p = *padding_idx;
    COHORT_CHECK(p >= -num_embeddings && p < num_embeddings,
                 "Embedding: padding_idx {} must be within num_embeddings {}", p, num_embeddings);
    padding_idx_ = p < 0 ? p + num_embeddings : p;
  }
  Tensor w = Tensor::empty({num_embeddings, embedding_dim});
  init::normal_(w, 0.0, 1.0, gen);
  if (padding_idx_) {
    NoGradGuard g;
    w.select(0, *padding_idx_).zero_();
  }
  register_parameter("weight", w);
}

std::string Embedding::extra_repr() const {
  std::string s = fmt::format("{}, {}", num_embeddings_, embedding_dim_);
  if (padding_idx_) s += fmt::format(", padding_idx={}", *padding_idx_);
  return s;
}

Tensor Embedding::forward(const Tensor& indices) {
  COHORT_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32,
               "{}: indices must be int64 or int32, got {} {}", describe(),
               dtype_name(indices.dtype()), shape_str(indices.sizes()));
  return embedding(weight(), indices, padding_idx_);
}

}  // namespace cohort::nn
