#include "cohort/train/tensor_strategy.h"

#include <string>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/nn/models/net.h"
#include "cohort/parallel/tensor_parallel/clip_grad_tensor_parallel.h"
#include "cohort/parallel/tensor_parallel/full_state_dict.h"
#include "cohort/parallel/tensor_parallel/mappings.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_gpt.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_models.h"

namespace cohort::train {
TensorStrategy::TensorStrategy(const TrainOptions& options,
                               std::shared_ptr<distributed::ProcessGroup> world, Generator& gen)
    : TrainStrategy(world), options_(options), world_(std::move(world)) {
  COHORT_CHECK(world_ != nullptr, "--strategy tensor needs a process group (run under cohort run)");
  full_ = make_model(options, gen);
  if (options.is_language_model()) {
    split_ = std::make_shared<parallel::TensorParallelGPT>(
        static_cast<const nn::GPT&>(*full_), world_,
        parallel::TensorParallelGPTOptions{.sequence_parallel = options.sequence_parallel});
  } else if (options.model == ModelKind::kNet) {
    split_ = parallel::make_tensor_parallel_net(static_cast<const nn::Net&>(*full_), world_);
  } else {
    split_ = parallel::make_tensor_parallel_mlp(static_cast<const nn::Sequential&>(*full_), world_);
  }
  layouts_ = parallel::parameter_layouts(*split_);
  auto names = full_->named_parameters();
  COHORT_ASSERT(names.size() == layouts_.size(), "tensor strategy: {} split parameters for {}",
                layouts_.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    COHORT_ASSERT(names[i].first == layouts_[i].name, "tensor strategy: parameter {} is {} not {}",
                  i, layouts_[i].name, names[i].first);
  }
  opt_ = make_optimizer(options, split_->parameters());
  full_opt_ = make_optimizer(options, full_->parameters());
  // Both optimizers group the parameters alike (make_optimizer's rule looks
  // at dims, which a split keeps), possibly in another order than the
  // model's (a GPT's decay groups): optimizer index -> layouts_ index.
  std::unordered_map<const TensorImpl*, size_t> index_of;
  for (size_t i = 0; i < layouts_.size(); ++i) index_of[layouts_[i].tensor.unsafe_impl()] = i;
  for (const optim::ParamGroup& g : opt_->param_groups())
    for (const Tensor& p : g.params) opt_param_.push_back(index_of.at(p.unsafe_impl()));
}

double TensorStrategy::step(const data::Batch& batch, const std::function<void(double)>& check) {
  opt_->zero_grad();
  // A GPT's loss is the vocabulary-parallel cross-entropy on each rank's
  // slice of the logits (never gathered).
  Tensor loss =
      options_.is_language_model()
          ? static_cast<parallel::TensorParallelGPT&>(*split_).forward(batch.input, batch.target)
          : compute_loss(options_.model, split_->forward(batch.input), batch.target);
  const double l = loss.item<double>();
  check(l);
  loss.backward();
  if (options_.is_language_model())
    static_cast<parallel::TensorParallelGPT&>(*split_).reduce_sequence_parallel_gradients();
  if (const double clip = clip_max_norm(options_.model); clip > 0) {
    parallel::clip_grad_norm_tensor_parallel(*split_, clip, *world_);
  }
  opt_->step();
  return l;
}

const parallel::ParameterLayout& TensorStrategy::opt_layout(int64_t opt_index) const {
  return layouts_.at(opt_param_.at(static_cast<size_t>(opt_index)));
}

int64_t TensorStrategy::state_split_dim(size_t param, const Tensor& t) const {
  const parallel::ParameterLayout& p = opt_layout(static_cast<int64_t>(param));
  // Per-element state (momentum, Adam's moments) is split as its parameter;
  // scalars (Adam's step) are the same on every rank.
  if (p.split_dim == parallel::kReplicated || t.sizes() != p.tensor.sizes()) {
    return parallel::kReplicated;
  }
  return p.split_dim;
}

void TensorStrategy::sync_full_model(bool optimizer) {
  full_->load_state_dict(parallel::full_state_dict(*split_, *world_));
  if (!optimizer) return;
  // Every rank holds the same keys in the same order, so the all-gathers
  // line up.
  TensorDict full;
  for (const auto& [key, t] : opt_->state_dict()) {
    const int64_t i = optim::state_key_param_index(key);
    const int64_t dim = i < 0 ? parallel::kReplicated : state_split_dim(static_cast<size_t>(i), t);
    full.insert(key,
                dim == parallel::kReplicated
                    ? t.clone()
                    : parallel::all_gather_along_dim(t, dim, *world_, opt_layout(i).split_blocks));
  }
  full_opt_->load_state_dict(full);
}

void TensorStrategy::after_resume() {
  parallel::load_full_state_dict(*split_, full_->state_dict(), *world_);
  TensorDict mine;
  for (const auto& [key, t] : full_opt_->state_dict()) {
    const int64_t i = optim::state_key_param_index(key);
    int64_t dim = parallel::kReplicated, blocks = 1;
    if (i >= 0) {
      const parallel::ParameterLayout& p = opt_layout(i);
      blocks = p.split_blocks;
      // The full state is shaped as the full parameter.
      if (p.split_dim != parallel::kReplicated && t.dim() == p.tensor.dim() && t.dim() > 0) {
        dim = p.split_dim;
      }
    }
    mine.insert(key,
                dim == parallel::kReplicated
                    ? t.clone()
                    : parallel::shard_along_dim(t, dim, world_->rank(), world_->size(), blocks));
  }
  opt_->load_state_dict(mine);
}

int TensorStrategy::threads() const { return num_threads(); }

std::string TensorStrategy::layout() const {
  return fmt::format(
      "tensor parallel over {} ranks ({})", world_->size(),
      options_.is_language_model()
          ? std::string("attention heads and MLP column/row-parallel, "
                        "vocabulary-parallel embedding and cross-entropy") +
                (options_.sequence_parallel ? ", sequence parallel" : "")
      : options_.model == ModelKind::kNet
          ? std::string("fc1 column-parallel, fc2 row-parallel, convolutions replicated")
          : std::string("linear layers paired column/row-parallel"));
}

}  // namespace cohort::train
