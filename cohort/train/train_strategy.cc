#include "cohort/train/train_strategy.h"

#include "cohort/base/error.h"
#include "cohort/train/pipeline_strategy.h"
#include "cohort/train/ps_strategy.h"
#include "cohort/train/replicated_strategy.h"
#include "cohort/train/tensor_strategy.h"
#include "cohort/train/zero_strategy.h"

namespace cohort::train {

std::unique_ptr<TrainStrategy> make_strategy(const TrainOptions& options, Strategy strategy,
                                             std::shared_ptr<distributed::ProcessGroup> world,
                                             Generator& gen, Tracer* tracer) {
  std::unique_ptr<TrainStrategy> s;
  switch (strategy) {
    case Strategy::kSingle:
    case Strategy::kDdp:
    case Strategy::kDp:
      // DDP records its buckets' reductions from its construction on.
      s = std::make_unique<ReplicatedStrategy>(options, strategy, std::move(world), gen, tracer);
      break;
    case Strategy::kPipeline:
      s = std::make_unique<PipelineStrategy>(options, std::move(world), gen);
      break;
    case Strategy::kPs:
      s = std::make_unique<PsStrategy>(options, std::move(world), gen);
      break;
    case Strategy::kTensor:
      s = std::make_unique<TensorStrategy>(options, std::move(world), gen);
      break;
    case Strategy::kZero:
      s = std::make_unique<ZeroStrategy>(options, std::move(world), gen);
      break;
    default:
      break;
  }
  if (s) {
    s->set_tracer(tracer);
    return s;
  }
  throw NotSupported(fmt::format("cohort train: --strategy {} is not available in this build",
                                 strategy_name(strategy)));
}

}  // namespace cohort::train
