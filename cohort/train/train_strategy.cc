#include "cohort/train/train_strategy.h"

#include "cohort/base/error.h"
#include "cohort/train/pipeline_strategy.h"
#include "cohort/train/ps_strategy.h"
#include "cohort/train/replicated_strategy.h"
#include "cohort/train/tensor_strategy.h"

namespace cohort::train {

std::unique_ptr<TrainStrategy> make_strategy(const TrainOptions& options, Strategy strategy,
                                             std::shared_ptr<distributed::ProcessGroup> world,
                                             Generator& gen) {
  switch (strategy) {
    case Strategy::kSingle:
    case Strategy::kDdp:
    case Strategy::kDp:
      return std::make_unique<ReplicatedStrategy>(options, strategy, std::move(world), gen);
    case Strategy::kPipeline:
      return std::make_unique<PipelineStrategy>(options, std::move(world), gen);
    case Strategy::kPs:
      return std::make_unique<PsStrategy>(options, std::move(world), gen);
    case Strategy::kTensor:
      return std::make_unique<TensorStrategy>(options, std::move(world), gen);
    default:
      break;
  }
  throw NotSupported(fmt::format("cohort train: --strategy {} is not available in this build",
                                 strategy_name(strategy)));
}

}  // namespace cohort::train
