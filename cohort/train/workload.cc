#include "cohort/train/workload.h"

#include <cmath>
#include <limits>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/error.h"
#include "cohort/data/mnist.h"
#include "cohort/data/synthetic_dataset.h"
#include "cohort/data/tensor_dataset.h"
#include "cohort/nn/activation.h"
#include "cohort/nn/models/net.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/models/toy_model.h"
#include "cohort/optim/adam.h"
#include "cohort/optim/sgd.h"

namespace cohort::train {

Splits make_splits(const TrainOptions& options) {
  switch (options.dataset) {
    case DatasetKind::kFashionMnist: {
      std::string dir = options.effective_data_dir();
      return {std::make_shared<data::FashionMnist>(dir, data::Split::kTrain),
              std::make_shared<data::FashionMnist>(dir, data::Split::kTest)};
    }
    case DatasetKind::kMnist: {
      std::string dir = options.effective_data_dir();
      return {std::make_shared<data::Mnist>(dir, data::Split::kTrain),
              std::make_shared<data::Mnist>(dir, data::Split::kTest)};
    }
    case DatasetKind::kSynthetic: {
      // One data set cut in two, so both splits share the class centres.
      data::SyntheticDataset::Options o;
      o.size = options.synthetic_train_size + options.synthetic_test_size;
      o.seed = options.seed;
      if (options.model == ModelKind::kToy) {
        o.input_shape = {10};
        o.num_classes = 0;
        o.target_shape = {5};
      } else {
        o.input_shape = {1, 28, 28};
        o.num_classes = 10;
      }
      data::SyntheticDataset all(o);
      int64_t n = options.synthetic_train_size;
      int64_t m = options.synthetic_test_size;
      return {std::make_shared<data::TensorDataset>(all.inputs().narrow(0, 0, n),
                                                    all.targets().narrow(0, 0, n)),
              std::make_shared<data::TensorDataset>(all.inputs().narrow(0, n, m),
                                                    all.targets().narrow(0, n, m))};
    }
  }
  throw InvalidArgument("make_splits: unknown data set");
}

nn::ModulePtr make_model(ModelKind kind, Generator& gen) {
  switch (kind) {
    case ModelKind::kNet:
      return std::make_shared<nn::Net>(gen);
    case ModelKind::kToy:
      return std::make_shared<nn::ToyModel>(gen);
    case ModelKind::kMlp:
      return nn::make_mlp(gen);
  }
  throw InvalidArgument("make_model: unknown model");
}

std::shared_ptr<nn::Sequential> make_sequential_model(ModelKind kind, Generator& gen) {
  switch (kind) {
    case ModelKind::kNet:
      return nn::make_net_sequential(gen);
    case ModelKind::kMlp:
      return nn::make_mlp(gen);
    case ModelKind::kToy: {
      // ToyModel's names and draws: net1, relu, net2.
      auto s = std::make_shared<nn::Sequential>();
      s->add("net1", std::make_shared<nn::Linear>(10, 10, gen));
      s->add("relu", std::make_shared<nn::ReLU>());
      s->add("net2", std::make_shared<nn::Linear>(10, 5, gen));
      return s;
    }
  }
  throw InvalidArgument("make_sequential_model: unknown model");
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& options,
                                                 std::vector<Tensor> params) {
  switch (options.optimizer) {
    case OptimizerKind::kSgd:
      return std::make_unique<optim::SGD>(
          std::move(params), optim::SGDOptions{.lr = options.effective_lr(),
                                               .momentum = options.effective_momentum()});
    case OptimizerKind::kAdam: {
      optim::AdamOptions o;
      o.lr = options.effective_lr();
      return std::make_unique<optim::Adam>(std::move(params), o);
    }
    case OptimizerKind::kAdamW: {
      optim::AdamWOptions o;
      o.lr = options.effective_lr();
      return std::make_unique<optim::AdamW>(std::move(params), o);
    }
  }
  throw InvalidArgument("make_optimizer: unknown optimizer");
}

Tensor compute_loss(ModelKind kind, const Tensor& output, const Tensor& target) {
  return is_classifier(kind) ? nll_loss(output, target) : mse_loss(output, target);
}

double clip_max_norm(ModelKind kind) { return kind == ModelKind::kNet ? 10.0 : 0.0; }

bool is_classifier(ModelKind kind) { return kind != ModelKind::kToy; }

Evaluation evaluate(nn::Module& model, ModelKind kind, const data::Dataset& test,
                    distributed::ProcessGroup* pg, int64_t batch_size) {
  const int64_t rank = pg != nullptr ? pg->rank() : 0;
  const int64_t world = pg != nullptr ? pg->size() : 1;
  const bool was_training = model.is_training();
  model.eval();
  // [loss sum, correct, examples]
  double sums[3] = {0, 0, 0};
  {
    NoGradGuard no_grad;
    std::vector<int64_t> indices;
    for (int64_t i = rank; i < test.size(); i += world) {
      indices.push_back(i);
      if (static_cast<int64_t>(indices.size()) == batch_size || i + world >= test.size()) {
        data::Batch b = test.get_batch(indices);
        Tensor out = model.forward(b.input);
        int64_t n = static_cast<int64_t>(indices.size());
        sums[0] += compute_loss(kind, out, b.target).item<double>() * static_cast<double>(n);
        if (is_classifier(kind)) {
          sums[1] += sum(eq(argmax(out, 1), b.target)).item<double>();
        }
        sums[2] += static_cast<double>(n);
        indices.clear();
      }
    }
  }
  model.train(was_training);
  if (pg != nullptr && world > 1) {
    pg->all_reduce(sums, 3, distributed::DataType::kFloat64);
  }
  Evaluation e;
  e.examples = static_cast<int64_t>(sums[2]);
  e.loss = sums[2] > 0 ? sums[0] / sums[2] : std::numeric_limits<double>::quiet_NaN();
  e.accuracy = is_classifier(kind) && sums[2] > 0 ? sums[1] / sums[2]
                                                  : std::numeric_limits<double>::quiet_NaN();
  return e;
}

}  // namespace cohort::train
