// nn::Embedding: a lookup table, as torch.nn.Embedding.
// indices (integer) [*] -> [*, embedding_dim]; weight [num_embeddings,
// embedding_dim] initialised N(0, 1) from gen; the padding_idx row (if any)
// is zeroed and receives no gradient. Thread safety: see module.h.
#pragma once

#include <optional>

#include "cohort/core/random.h"
#include "cohort/nn/module.h"

namespace cohort::nn {

class Embedding : public Cloneable<Embedding> {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen,
            std::optional<int64_t> padding_idx = std::nullopt);

  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;

  const Tensor& weight() const { return param(0); }
  Tensor& weight() { return param(0); }

 private:
  int64_t num_embeddings_;
  int64_t embedding_dim_;
  std::optional<int64_t> padding_idx_;
};

}  // namespace cohort::nn
