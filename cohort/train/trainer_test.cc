#include "cohort/train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/base/runtime.h"
#include "cohort/checkpoint/safetensors.h"
#include "cohort/core/fake_device_testing.h"
#include "cohort/distributed/options.h"
#include "cohort/train/metrics_writer.h"
#include "cohort/train/workload.h"

namespace cohort::train {
namespace {

std::string temp_dir(const std::string& tag) {
  std::string tmpl =
      (std::filesystem::temp_directory_path() / ("cohort_trainer_" + tag + "_XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  EXPECT_NE(mkdtemp(buf.data()), nullptr);
  return buf.data();
}

TrainOptions small_net() {
  TrainOptions o;
  o.dataset = DatasetKind::kSynthetic;
  o.synthetic_train_size = 256;
  o.synthetic_test_size = 64;
  o.threads = 1;
  o.lr = 0.002;
  o.strategy = Strategy::kSingle;
  return o;
}

// The same run as DataParallel: 2 replicas on 2 threads.
TrainOptions as_dp(TrainOptions o) {
  o.strategy = Strategy::kDp;
  o.replicas = 2;
  o.threads = 2;
  return o;
}

// Trains with a fresh checkpoint directory named after `tag` and returns the
// last checkpoint's weights by name.
auto trained_weights(TrainOptions o, const std::string& tag) {
  o.checkpoint_dir = temp_dir(tag);
  TrainResult r = Trainer(o).run();
  return checkpoint::load_safetensors(r.last_checkpoint + "/model.safetensors").tensors;
}

class Recorder : public TrainObserver {
 public:
  void on_start(const RunInfo& info) override { started = true; }
  void on_step(const StepInfo& s) override { steps.push_back(s.step); }
  void on_epoch_end(const EpochStats& e) override { epochs.push_back(e); }
  void on_checkpoint(const std::string& path, int64_t step) override {
    checkpoints.push_back(path);
  }
  bool started = false;
  std::vector<int64_t> steps;
  std::vector<EpochStats> epochs;
  std::vector<std::string> checkpoints;
};

TEST(Trainer, BoundsItsOwnThreadAndLeavesTheProcessDefaultAlone) {
  const int before = Runtime::process().options().num_threads;
  TrainOptions o = small_net();
  o.threads = before + 1;
  o.max_steps = 2;
  Trainer(o).run();
  EXPECT_EQ(Runtime::process().options().num_threads, before);
  EXPECT_EQ(num_threads(), before);  // this thread's budget is restored too
}

TEST(TrainOptions, ParsesNamesAndRejectsUnknownOnes) {
  EXPECT_EQ(parse_model("toy"), ModelKind::kToy);
  EXPECT_EQ(parse_dataset("fashion-mnist"), DatasetKind::kFashionMnist);
  EXPECT_EQ(parse_optimizer("adamw"), OptimizerKind::kAdamW);
  EXPECT_EQ(parse_strategy("dp"), Strategy::kDp);
  EXPECT_THROW(parse_model("resnet"), InvalidArgument);
  try {
    parse_optimizer("lbfgs");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("sgd, adam, adamw"), std::string::npos) << e.what();
  }
}

TEST(TrainOptions, DefaultsFollowTheModelAndValidateRejectsBadValues) {
  TrainOptions o;
  EXPECT_DOUBLE_EQ(o.effective_lr(), 0.01);
  EXPECT_DOUBLE_EQ(o.effective_momentum(), 0.9);
  EXPECT_EQ(o.effective_data_dir(), "/usr/share/datasets/fashion-mnist");
  o.model = ModelKind::kToy;
  EXPECT_DOUBLE_EQ(o.effective_lr(), 0.001);
  EXPECT_THROW(o.validate(), InvalidArgument);  // toy on fashion-mnist
  o.dataset = DatasetKind::kSynthetic;
  EXPECT_NO_THROW(o.validate());
  for (auto bad : std::vector<std::function<void(TrainOptions&)>>{
           [](TrainOptions& t) { t.epochs = 0; }, [](TrainOptions& t) { t.batch_size = 0; },
           [](TrainOptions& t) { t.lr = -1; }, [](TrainOptions& t) { t.lr = NAN; },
           [](TrainOptions& t) { t.momentum = 1.0; }, [](TrainOptions& t) { t.threads = -1; },
           [](TrainOptions& t) { t.checkpoint_every = 3; },
           [](TrainOptions& t) { t.resume = "auto"; }, [](TrainOptions& t) { t.replicas = 0; }}) {
    TrainOptions t = o;
    bad(t);
    EXPECT_THROW(t.validate(), InvalidArgument);
  }
}

// GPUs train single, ddp and zero (and auto, which resolves to single or
// ddp); the others are refused at validation, naming the strategy. The fake
// device stands in for a GPU: validation asks the device runtime first.
TEST(TrainOptions, DeviceCudaTakesTheDataParallelStrategiesAndNamesTheOthers) {
  testing::FakeCudaDevice fake(2);
  TrainOptions o = small_net();
  o.device = Device("cuda");
  for (Strategy s : {Strategy::kAuto, Strategy::kSingle, Strategy::kDdp, Strategy::kZero}) {
    o.strategy = s;
    EXPECT_NO_THROW(o.validate()) << strategy_name(s);
    EXPECT_TRUE(runs_on_gpus(s)) << strategy_name(s);
  }
  for (Strategy s : {Strategy::kDp, Strategy::kPipeline, Strategy::kTensor, Strategy::kPs}) {
    o.strategy = s;
    EXPECT_FALSE(runs_on_gpus(s)) << strategy_name(s);
    try {
      o.validate();
      ADD_FAILURE() << strategy_name(s) << " accepted on cuda";
    } catch (const InvalidArgument& e) {
      const std::string want = fmt::format(
          "--device cuda: --strategy {} on GPUs is not implemented yet", strategy_name(s));
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(TrainOptions, BackendNamesAndNcclNeedsCudaTensors) {
  TrainOptions o = small_net();
  o.strategy = Strategy::kDdp;
  for (const char* b : {"auto", "native", "mpi"}) {
    o.backend = b;
    EXPECT_NO_THROW(o.validate()) << b;
  }
  o.backend = "gloo";
  EXPECT_THROW(o.validate(), InvalidArgument);
  o.backend = "nccl";
  try {
    o.validate();
    FAIL() << "nccl accepted on the cpu";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--backend nccl carries CUDA tensors only"),
              std::string::npos)
        << e.what();
  }
  testing::FakeCudaDevice fake(1);
  o.device = Device("cuda");
  EXPECT_NO_THROW(o.validate());
}

// "auto" is settled before the group only under mpirun without MASTER_ADDR;
// the rest is the device's choice (distributed::init_worker_group).
TEST(Trainer, ResolveBackendLeavesAutoToTheDeviceChoiceOutsideMpirun) {
  EXPECT_EQ(resolve_backend("auto", false), "auto");
  EXPECT_EQ(resolve_backend("native", true), "native");
  EXPECT_EQ(resolve_backend("nccl", true), "nccl");
  EXPECT_EQ(resolve_backend("auto", true),
            distributed::backend_available(distributed::BackendKind::kMpi) ? "mpi" : "auto");
}

TEST(TrainOptions, MicroBatchesAreCheckedOnlyWhereAPipelineRuns) {
  // A batch smaller than the pipeline's default of 4 micro-batches is fine
  // for every strategy that does not cut batches (issue 34).
  for (Strategy s : {Strategy::kAuto, Strategy::kSingle, Strategy::kDdp, Strategy::kDp,
                     Strategy::kTensor, Strategy::kPs, Strategy::kZero}) {
    TrainOptions o = small_net();
    o.strategy = s;
    o.batch_size = 2;
    EXPECT_NO_THROW(o.validate()) << strategy_name(s);
  }
  // Under the pipeline the default adapts to the batch ...
  TrainOptions p = small_net();
  p.strategy = Strategy::kPipeline;
  EXPECT_EQ(p.effective_micro_batches(), 4);
  p.batch_size = 3;
  EXPECT_EQ(p.effective_micro_batches(), 3);
  EXPECT_NO_THROW(p.validate());
  // ... and an explicit count that does not fit is still an error.
  p.micro_batches = 4;
  EXPECT_THROW(p.validate(), InvalidArgument);
  p.micro_batches = 0;
  EXPECT_THROW(p.validate(), InvalidArgument);
  p.micro_batches = 3;
  EXPECT_NO_THROW(p.validate());
}

TEST(MetricsWriter, AppendsOneObjectPerLineWithNullForNonFinite) {
  std::string path = temp_dir("metrics") + "/m.jsonl";
  MetricsWriter w(path);
  w.check_writable();
  w.append({{"epoch", 1}, {"test_accuracy", json_number(0.5)}});
  w.append({{"epoch", 2}, {"test_accuracy", json_number(std::nan(""))}});
  std::ifstream in(path);
  std::string a, b, c;
  ASSERT_TRUE(std::getline(in, a));
  ASSERT_TRUE(std::getline(in, b));
  EXPECT_FALSE(std::getline(in, c));
  EXPECT_EQ(nlohmann::json::parse(a).at("test_accuracy").get<double>(), 0.5);
  EXPECT_TRUE(nlohmann::json::parse(b).at("test_accuracy").is_null());
  EXPECT_THROW(MetricsWriter("/nonexistent/dir/m.jsonl").check_writable(), IoError);
}

TEST(Trainer, RunsEpochsAndReportsToTheObserver) {
  TrainOptions o = small_net();
  o.epochs = 2;
  o.log_every = 1;
  Recorder rec;
  TrainResult r = Trainer(o).run(&rec);
  EXPECT_TRUE(rec.started);
  EXPECT_EQ(r.info.steps_per_epoch, 4);
  EXPECT_EQ(r.steps, 8);
  ASSERT_EQ(rec.epochs.size(), 2u);
  EXPECT_EQ(rec.steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  for (const EpochStats& e : rec.epochs) {
    EXPECT_TRUE(e.complete);
    EXPECT_EQ(e.samples, 256);
    EXPECT_TRUE(std::isfinite(e.train_loss));
    EXPECT_GE(e.test_accuracy, 0.0);
    EXPECT_LE(e.test_accuracy, 1.0);
  }
}

TEST(Trainer, MaxStepsStopsMidEpochAndResumeContinuesTheSameRun) {
  std::string straight = temp_dir("straight");
  std::string stopped = temp_dir("stopped");
  TrainOptions o = small_net();
  o.epochs = 2;
  o.max_steps = 7;
  o.checkpoint_dir = straight;
  TrainResult full = Trainer(o).run();
  EXPECT_EQ(full.steps, 7);

  TrainOptions a = o;
  a.checkpoint_dir = stopped;
  a.max_steps = 3;
  Recorder rec;
  TrainResult part = Trainer(a).run(&rec);
  ASSERT_EQ(rec.epochs.size(), 1u);
  EXPECT_FALSE(rec.epochs[0].complete);
  EXPECT_EQ(part.last_checkpoint, stopped + "/step-00000003");

  TrainOptions b = o;
  b.checkpoint_dir = stopped;
  b.resume = "auto";
  TrainResult rest = Trainer(b).run();
  EXPECT_EQ(rest.info.resumed_from, stopped + "/step-00000003");
  EXPECT_EQ(rest.info.start_step, 3);
  EXPECT_EQ(rest.steps, 7);
  auto x = checkpoint::load_safetensors(full.last_checkpoint + "/model.safetensors").tensors;
  auto y = checkpoint::load_safetensors(rest.last_checkpoint + "/model.safetensors").tensors;
  ASSERT_EQ(x.keys(), y.keys());
  for (const auto& [name, t] : x) EXPECT_TRUE(equal(t, y.at(name))) << name;
}

TEST(Trainer, NonFiniteLossNamesTheStep) {
  TrainOptions o = small_net();
  o.lr = 1e12;
  o.momentum = 0;
  o.epochs = 50;
  try {
    Trainer(o).run();
    FAIL() << "training with lr 1e12 did not diverge";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at step"), std::string::npos) << e.what();
  }
}

TEST(Trainer, DataParallelMatchesSingleProcessTraining) {
  TrainOptions o = small_net();
  o.max_steps = 3;
  auto x = trained_weights(o, "single");
  auto y = trained_weights(as_dp(o), "dp");
  for (const auto& [name, t] : x) EXPECT_TRUE(allclose(t, y.at(name), 1e-4, 1e-5)) << name;
}

// --precision bf16: float32 parameters (master weights) that follow the
// float32 run within bf16 tolerance but not bit for bit; DataParallel's
// replica threads compute under the same policy (they match one process).
TEST(Trainer, Bf16PrecisionKeepsFloat32MasterWeights) {
  TrainOptions o = small_net();
  o.max_steps = 3;
  TrainOptions h = o;
  h.precision = ComputePrecision::kBFloat16;
  h.bf16_path = native::Bf16Path::kEmulated;
  auto x = trained_weights(o, "fp32"), y = trained_weights(h, "bf16"),
       z = trained_weights(as_dp(h), "bf16dp");
  bool all_equal = true;
  for (const auto& [name, t] : x) {
    EXPECT_EQ(y.at(name).dtype(), kFloat32) << name;
    EXPECT_TRUE(allclose(y.at(name), t, 1e-2, 1e-3)) << name;
    all_equal = all_equal && equal(y.at(name), t);
    EXPECT_TRUE(allclose(z.at(name), y.at(name), 1e-4, 1e-5)) << name;
  }
  EXPECT_FALSE(all_equal) << "bf16 training gave the float32 run's bits: policy not applied?";
  TrainOptions bad = small_net();
  bad.strategy = Strategy::kDp;
  bad.grad_reduce = ComputePrecision::kBFloat16;
  EXPECT_THROW(bad.validate(), InvalidArgument);
}

// --bf16-weights: after training every parameter holds a bf16 value (the
// initial weights are rounded too); DataParallel's replicas train the master
// as one process does; nearest and stochastic rounding give different runs;
// strategies that shard the model refuse the option.
TEST(Trainer, Bf16WeightsLeaveBf16ValuesOnEveryStrategyThatHoldsTheModel) {
  TrainOptions o = small_net();
  o.max_steps = 3;
  o.bf16_weights = optim::WeightRounding::kStochastic;
  TrainOptions n = o;
  n.bf16_weights = optim::WeightRounding::kNearest;
  auto x = trained_weights(o, "bf16w"), y = trained_weights(as_dp(o), "bf16wdp"),
       z = trained_weights(n, "bf16wn");
  bool nearest_equal = true;
  for (const auto& [name, t] : x) {
    for (const Tensor& w : {t, y.at(name), z.at(name)}) {
      ASSERT_EQ(w.dtype(), kFloat32) << name;
      for (float v : w.to_vector<float>()) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        ASSERT_EQ(u & 0xffffu, 0u) << name << " holds " << v << ", not a bf16 value";
      }
    }
    // DataParallel sums the replicas' gradients in another order: a value
    // close to a rounding boundary may land one bf16 step away.
    EXPECT_TRUE(allclose(y.at(name), t, 1e-2, 1e-3)) << name;
    nearest_equal = nearest_equal && equal(z.at(name), t);
  }
  EXPECT_FALSE(nearest_equal) << "stochastic rounding gave nearest rounding's bits";
  TrainOptions bad = small_net();
  bad.strategy = Strategy::kPipeline;
  bad.bf16_weights = optim::WeightRounding::kNearest;
  EXPECT_THROW(bad.validate(), InvalidArgument);
}

TEST(Evaluate, CountsCorrectPredictions) {
  TrainOptions o = small_net();
  Splits s = make_splits(o);
  Generator gen(0);
  auto model = make_model(ModelKind::kNet, gen);
  Evaluation e = evaluate(*model, ModelKind::kNet, *s.test, nullptr, 16);
  EXPECT_EQ(e.examples, 64);
  std::vector<int64_t> indices(64);
  for (int64_t i = 0; i < 64; ++i) indices[static_cast<size_t>(i)] = i;
  data::Batch all = s.test->get_batch(indices);
  double correct = sum(eq(argmax(model->forward(all.input), 1), all.target)).item<double>();
  EXPECT_DOUBLE_EQ(e.accuracy, correct / 64);
}

}  // namespace
}  // namespace cohort::train
