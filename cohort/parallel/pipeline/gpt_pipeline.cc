#include "cohort/parallel/pipeline/gpt_pipeline.h"

#include "cohort/base/error.h"

namespace cohort::parallel::pipeline {

namespace {

// wte(idx) + wpe(positions), over the plain model's two embeddings.
class GPTEmbedding : public nn::Cloneable<GPTEmbedding> {
 public:
  GPTEmbedding(nn::ModulePtr wte, nn::ModulePtr wpe, int64_t block_size)
      : Cloneable("GPTEmbedding"), block_size_(block_size) {
    register_module("wte", std::move(wte));
    register_module("wpe", std::move(wpe));
  }

  // idx int64 [B, T], T <= block_size -> [B, T, C].
  Tensor forward(const Tensor& idx) override {
    COHORT_CHECK(idx.defined() && idx.dtype() == kInt64 && idx.dim() == 2 && idx.size(1) >= 1 &&
                     idx.size(1) <= block_size_,
                 "{}: idx must be int64 [B, T] with 1 <= T <= block_size {}, got {} {}", describe(),
                 block_size_, idx.defined() ? dtype_name(idx.dtype()) : "undefined",
                 idx.defined() ? shape_str(idx.sizes()) : "");
    Tensor pos = Tensor::arange(0.0, static_cast<double>(idx.size(1)), 1.0, kInt64);
    return add(child<nn::Embedding>(0)(idx), child<nn::Embedding>(1)(pos));
  }

 private:
  int64_t block_size_;
};

}  // namespace

GPTPipelineModel make_gpt_pipeline_model(const nn::GPT& gpt) {
  GPTPipelineModel m;
  m.layers = std::make_shared<nn::Sequential>();
  const nn::ModuleDict& tr = gpt.transformer();
  m.layers->add("embed",
                std::make_shared<GPTEmbedding>(tr["wte"], tr["wpe"], gpt.config().block_size));
  m.layer_names.push_back("transformer");
  const nn::ModuleList& h = gpt.h();
  for (size_t i = 0; i < h.size(); ++i) {
    m.layers->add(fmt::format("h{}", i), h[i]);
    m.layer_names.push_back(fmt::format("transformer.h.{}", i));
  }
  m.layers->add("ln_f", tr["ln_f"]);
  m.layer_names.push_back("transformer.ln_f");
  auto children = gpt.named_children();
  for (const auto& [name, child] : children)
    if (name == "lm_head") m.layers->add("head", child);
  m.layer_names.push_back("lm_head");
  m.tied_parameters = {{"transformer.wte.weight", "lm_head.weight"}};
  return m;
}

std::unique_ptr<Pipeline> make_gpt_pipeline(const nn::GPT& gpt, PipelineGrid grid,
                                            PipelineOptions options) {
  GPTPipelineModel m = make_gpt_pipeline_model(gpt);
  options.layer_names = std::move(m.layer_names);
  options.tied_parameters = std::move(m.tied_parameters);
  return std::make_unique<Pipeline>(m.layers, std::move(grid), std::move(options));
}

Tensor gpt_loss_fn(const Tensor& logits, const Tensor& targets) {
  COHORT_CHECK(logits.dim() == 3 && targets.dim() == 2 && targets.size(0) == logits.size(0) &&
                   targets.size(1) == logits.size(1),
               "gpt_loss_fn: logits must be [b, T, V] and targets [b, T], got {} and {}",
               shape_str(logits.sizes()), shape_str(targets.sizes()));
  return cross_entropy(reshape(logits, {-1, logits.size(2)}), reshape(targets, {-1}),
                       Reduction::kMean, -1);
}

}  // namespace cohort::parallel::pipeline
